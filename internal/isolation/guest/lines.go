package guest

import (
	"bufio"
	"errors"
	"io"
)

// CopyLines copies r to w line by line, each line after prefix, so that
// nothing envd or the sandbox prints can pass for the lines an init
// writes itself (its exit reason among them) where the host reads both.
func CopyLines(w io.Writer, r io.Reader, prefix string) {
	br := bufio.NewReaderSize(r, 4096)
	atStart := true
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if atStart {
				_, _ = io.WriteString(w, prefix)
			}
			_, _ = w.Write(line)
			atStart = line[len(line)-1] == '\n'
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if !atStart {
				_, _ = io.WriteString(w, "\n")
			}
			return
		}
	}
}
