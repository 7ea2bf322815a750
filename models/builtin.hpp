// The one call a program (or a test main) makes at start-up, before loading any config: it registers
// every built-in model family's ArchRules with the config layer (see models/model.hpp). A light
// header (no torch) so that test mains and tools can include it cheaply.
#pragma once

namespace trainer::models {

// Once per process; later calls do nothing.
void register_builtin_archs();

}  // namespace trainer::models
