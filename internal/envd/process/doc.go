// Package process implements envd's process.Process Connect service (spec
// §3.3): it starts commands and PTYs as a sandbox user, streams their output
// to any number of subscribers, takes input, signals and resizes them, and
// remembers how each one ended for 30 s so a late Connect still learns it.
//
// A started command belongs to the Service, not to the stream that started
// it: a client that disconnects leaves it running, and only its own exit, a
// signal, or the Connect-Timeout-Ms lifetime of its Start request ends it.
// Output that nobody is subscribed to is dropped; there is no replay buffer.
package process
