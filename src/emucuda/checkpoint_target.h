// The checkpoint side of a CUDA process: at cuInit the process installs a handler for
// SIGRTMAX-3 and starts one control thread. The handler only stores the request's sequence number
// in process-private memory and wakes the thread; the thread reads the request file, performs
// lock / checkpoint / restore / unlock on the process's own driver state, and writes the
// process's state file. Everything it needs lives in the process itself, so it survives a CRIU
// dump and restore onto another machine where the pids differ.
#ifndef PALADIN_EMUCUDA_CHECKPOINT_TARGET_H_
#define PALADIN_EMUCUDA_CHECKPOINT_TARGET_H_

namespace paladin::emucuda {

// Installs the handler, starts the control thread and writes the RUNNING state file. Called once,
// by cuInit.
void StartCheckpointControl();
// Removes this process's state file (at exit).
void RemoveOwnStateFile();

}  // namespace paladin::emucuda

#endif  // PALADIN_EMUCUDA_CHECKPOINT_TARGET_H_
