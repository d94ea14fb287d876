// Package filesystem implements envd's filesystem.Filesystem Connect service
// (spec/e2b-protocol.md §3.4): stat, mkdir, move, list and remove on paths
// resolved for the requesting user, and directory watches, either streamed
// (WatchDir) or polled (CreateWatcher, GetWatcherEvents, RemoveWatcher).
//
// Each RPC handler lives in its own file. entry.go builds the EntryInfo
// every handler returns; watcher.go holds the fsnotify watcher that both
// kinds of watch share.
package filesystem
