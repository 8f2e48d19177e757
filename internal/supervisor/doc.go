// Package supervisor runs `shardkit run` as two processes (K4): a parent
// that lives as long as the instance and a worker (the same binary,
// re-executed) that does all the work.
//
// The parent owns: starting the worker, forwarding SIGINT, SIGTERM and
// SIGHUP (StopSignals) to it and waiting for its bounded graceful
// shutdown, restarting a worker that crashed with exponential backoff,
// and, when the worker asks for it, wiping the contents of the data dir
// and starting the worker again at the entrypoint it named (rebootstrap). The worker side of the contract is
// IsWorker, Entrypoint, AttachWorker and RequestRebootstrap.
//
// It must never know what an instance does: it reads no database, speaks
// to no peer, and interprets neither the entrypoint string nor the
// worker's output. It never deletes anything outside the data dir.
//
// # The data dir
//
// Every fresh instance rebootstraps once (after discovery), so a wipe is
// routine, and the data dir defaults to ".". Before the first worker the
// parent therefore refuses a data dir that is empty, "/" or the user's
// home, creates a missing one, and marks a new or empty one with the file
// .shardkit-data-dir; it refuses a non-empty dir without that marker (its
// files are someone else's). A wipe deletes everything in the dir but the
// marker, removes symbolic links without following them, and refuses a dir
// without the marker.
//
// # The contract between parent and worker
//
// The parent starts os.Executable() with its own arguments and environment
// plus:
//
//	SHARDKIT_SUPERVISED_WORKER=1    this process is the worker
//	SHARDKIT_ENTRYPOINT=<string>    what the previous worker asked for ("" at first)
//	SHARDKIT_SUPERVISOR_PID=<pid>   the parent, to detect that it died before we started
//	SHARDKIT_SUPERVISOR_PIPE=<ino>  the inode of the request pipe on fd 3
//
// and the write end of a pipe as file descriptor 3. To ask for a
// rebootstrap the worker writes one JSON line to fd 3,
//
//	{"type":"rebootstrap","entrypoint":"join:127.0.0.1:3302"}
//
// and exits with ExitRebootstrap. The parent acts on the request only when
// both arrive; an exit code without a valid request is a crash (restart
// with backoff, nothing wiped).
//
// Exit codes of the worker, and what the parent does:
//
//	0                  clean stop: the parent exits 0
//	ExitRebootstrap    90: wipe the data dir, start again at the requested entrypoint
//	ExitRefused        91: the worker cannot start or join and said why on stderr; no restart, the parent exits 91
//	ExitExpelled       92: the instance is expelled; no restart, the parent exits 92
//	anything else      crash (also death by a signal): restart after a backoff
//
// After the parent has forwarded a stop signal it restarts nothing: it
// exits with the worker's exit code, or 128+signal if the worker was killed.
//
// # Parent death
//
// On Linux the worker is started with Pdeathsig = SIGKILL, so it dies with
// the parent. Pdeathsig fires when the thread that forked the worker ends,
// so the goroutine that starts and waits for a worker keeps its OS thread
// locked for the worker's lifetime (golang/go#27505). AttachWorker closes
// the remaining race: a worker whose parent died before the death signal
// was armed finds a parent pid other than SHARDKIT_SUPERVISOR_PID and
// must exit.
package supervisor
