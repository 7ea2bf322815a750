// Sanitizer defaults for test_asan_readers (tests/CMakeLists.txt). LibTorch keeps allocations alive
// until exit on purpose (registries, thread pools), which LeakSanitizer would report as leaks; the
// point of this target is out-of-bounds access and undefined behaviour in our readers.
extern "C" const char* __asan_default_options() { return "detect_leaks=0:abort_on_error=0:exitcode=1"; }
extern "C" const char* __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1"; }
