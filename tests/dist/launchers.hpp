// The external launchers the dist tests start a job with: torchrun from the project's Python
// environment, and the installed mpirun ("" when there is none).
#pragma once

#include <cstdlib>
#include <string>

#include "spawn.hpp"

namespace trainer::test {

inline std::string venv_torchrun() {
  const char* venv = std::getenv("TRAINER_VENV");
  const char* home = std::getenv("HOME");
  return (venv ? std::string(venv) : std::string(home ? home : "/root") + "/.cache/trainer/venv-torch-2.11.0") +
         "/bin/torchrun";
}

inline std::string installed_mpirun() {
  auto r = run_shell("command -v mpirun");
  if (r.exit_code != 0 || r.output.empty()) return "";
  return r.output.substr(0, r.output.find('\n'));
}

}  // namespace trainer::test
