// train.reuse_host_memory: glibc keeps blocks up to 32 MiB on the heap for reuse.
#include <catch2/catch.hpp>

#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "device/device.hpp"

TEST_CASE("keep_host_memory_for_reuse: blocks up to 32 MiB come from the heap, larger ones from mmap", "[unit]") {
#if defined(__GLIBC__)
  REQUIRE(!trainer::device::keep_host_memory_for_reuse().empty());
  auto mapped = [] { return mallinfo2().hblkhd; };  // bytes in mmap()ed blocks
  const size_t before = mapped();
  void* a = std::malloc(20u << 20);  // 20 MiB: glibc's default (128 KiB, dynamic) would map it
  REQUIRE(a != nullptr);
  std::memset(a, 1, 20u << 20);
  CHECK(mapped() == before);
  void* b = std::malloc(40u << 20);  // above the 32 MiB ceiling: mapped
  REQUIRE(b != nullptr);
  CHECK(mapped() >= before + (40u << 20));
  std::free(b);
  std::free(a);
#else
  SUCCEED("not glibc");
#endif
}
