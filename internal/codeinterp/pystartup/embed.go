package pystartup

import _ "embed"

// Script is startup.py, the kernel's startup script.
//
//go:embed startup.py
var Script []byte

// ExecFilesFlag is the ipykernel_launcher flag that makes the kernel run the
// startup script at path before the first cell.
func ExecFilesFlag(path string) string {
	return "--IPKernelApp.exec_files=" + path
}
