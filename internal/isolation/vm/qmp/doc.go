// Package qmp is a small client of QEMU's machine protocol (QMP) over the
// unix socket QEMU opens with -qmp unix:PATH,server=on,wait=off: commands
// and their replies (Execute, errors as *Error with QMP's class and
// description), descriptors passed with SCM_RIGHTS (ExecuteWithFile, for
// getfd), asynchronous events kept apart from replies (Subscribe), and on
// top the operations the vm backend needs: Stop, Cont, Status, Quit, Save
// and MigrateIncoming.
//
// # Save and restore on QEMU 7.2 (Debian 12's qemu-system-x86)
//
// What this QEMU accepts, tried on this host (TCG, -M microvm):
//
//   - No file: migration URI (QEMU 8.2 added it): migrate with
//     "file:/path" answers GenericError "Parameter 'uri' expects a valid
//     migration protocol". A file is reached through a descriptor
//     instead: getfd {"fdname": N} with the file passed by SCM_RIGHTS, then
//     migrate {"uri": "fd:N"}. QEMU writes the stream to a regular file
//     fine and closes its copy at the end.
//   - Save: migrate-set-capabilities {"capabilities": [{"capability":
//     "events", "state": true}]} turns on the MIGRATION event (status
//     setup, active, completed or failed; the reason of a failure is
//     query-migrate's "error-desc"). The default max-bandwidth of
//     128 MiB/s applies to a file too: a stopped 128 MiB guest (64 MB of
//     stream) took 0.52 s with it and 0.12 s with migrate-set-parameters
//     {"max-bandwidth": 9223372036854775807}. After the migration the
//     source is "postmigrate"; cont resumes it.
//   - Restore: start the same machine and devices with -incoming defer
//     (state "inmigrate"), then the same getfd and migrate-incoming
//     {"uri": "fd:N"}; the MIGRATION event (with the events capability
//     set on this side too) reports completed. It took 24 ms for the
//     guest above. The restored VM is "paused" if it was paused when
//     saved, or if QEMU was started with -S; running otherwise.
//     -incoming fd:3 with the file as an inherited descriptor works as
//     well, but it starts loading before QMP can watch it, so the
//     package uses -incoming defer.
//   - A stream that does not load ends QEMU 7.2 (exit status 1, "Not a
//     migration stream" or similar on its stderr, nothing over QMP but a
//     MIGRATION failed event): MigrateIncoming returns an error wrapping
//     ErrClosed.
//   - The stream holds CPU, device and RAM state, not the disks: the
//     caller keeps the disk images as they were at Save.
package qmp
