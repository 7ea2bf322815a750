// Process exit codes: a public contract, documented in the README.
#pragma once

namespace trainer {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;         // runtime failure (data, I/O, numerics, a peer died)
constexpr int kExitUsage = 2;           // bad command line or config; nothing was started
constexpr int kExitSavedAfterSignal = 75;  // stopped by SIGTERM/SIGUSR1/SIGINT after saving a checkpoint:
                                           // requeue me (75 is EX_TEMPFAIL in sysexits.h)
constexpr int kExitDataChanged = 65;  // a data file changed under the run (truncated, deleted, replaced,
                                      // modified) and data.on_change is error (or the reload failed):
                                      // a checkpoint was saved first (65 is EX_DATAERR in sysexits.h)
constexpr int kExitCheckpointFailed = 74;  // checkpoint saves failed: the final one, the one a stop signal
                                           // asked for, more than checkpoint.max_failures in a row under
                                           // on_error: warn, or any under abort (74 is EX_IOERR)

}  // namespace trainer
