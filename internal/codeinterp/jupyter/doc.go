// Package jupyter starts a Jupyter kernel process and speaks the Jupyter
// messaging protocol (v5.3) to it directly over ZeroMQ, without a Jupyter
// server. It backs the code interpreter.
//
// A Kernel owns the process (in its own process group, so that interrupts and
// the final kill reach whatever the code spawned), a connection file, three
// sockets (shell and control DEALERs, an iopub SUB) and two reader goroutines
// that route replies and iopub messages by their parent msg_id to the request
// waiting for them. The heartbeat and stdin channels are not used: the
// process itself tells when the kernel dies, and input is never allowed.
package jupyter
