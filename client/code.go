package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// CodeInterpreterPort is the port of the code interpreter server inside
// sandboxes of a code interpreter template (E2B's code-interpreter-v1).
const CodeInterpreterPort = 49999

// maxExecutionLine bounds one line of the /execute stream (a result may
// carry a base64 image).
const maxExecutionLine = 64 << 20

// CodeOptions configures RunCode. Language and ContextID are exclusive.
type CodeOptions struct {
	// Language is the language of the default context to run in:
	// "python" (the default), "r", "javascript", "typescript", "java" or
	// "bash".
	Language string
	// ContextID runs the code in a context created earlier, whose state
	// (variables, imports) it shares.
	ContextID string
	// EnvVars are set for this execution only.
	EnvVars map[string]string
}

// Execution is what running a cell produced, as the code interpreter's
// /execute stream reports it.
type Execution struct {
	Stdout  []string     `json:"stdout"`
	Stderr  []string     `json:"stderr"`
	Results []CodeResult `json:"results"`
	// Error is the error the code raised, if any.
	Error *CodeError `json:"error,omitempty"`
	// Count is the execution count of the cell.
	Count int `json:"executionCount,omitempty"`
}

// CodeResult is one displayed value: the cell's own result (IsMain) or
// what it displayed. Each set field is one representation of the value;
// PNG and JPEG are base64.
type CodeResult struct {
	IsMain   bool   `json:"isMainResult"`
	Text     string `json:"text,omitempty"`
	HTML     string `json:"html,omitempty"`
	Markdown string `json:"markdown,omitempty"`
	SVG      string `json:"svg,omitempty"`
	PNG      string `json:"png,omitempty"`
	JPEG     string `json:"jpeg,omitempty"`
	JSON     any    `json:"json,omitempty"`
}

// CodeError is an error raised by the code.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// RunCode runs code in the sandbox's code interpreter (POST /execute on
// CodeInterpreterPort) and waits for the execution to end. Code that
// raises is not an error: its Execution carries the Error. Canceling ctx
// interrupts the execution.
func (s *Sandbox) RunCode(ctx context.Context, code string, opts CodeOptions) (*Execution, error) {
	ex, err := s.runCode(ctx, code, opts)
	if err != nil {
		return nil, fmt.Errorf("running code in sandbox %s: %w", s.ID, err)
	}
	return ex, nil
}

func (s *Sandbox) runCode(ctx context.Context, code string, opts CodeOptions) (*Execution, error) {
	if opts.Language != "" && opts.ContextID != "" {
		return nil, errors.New("a language and a context are exclusive (the context has its language)")
	}
	body, err := json.Marshal(struct {
		Code      string            `json:"code"`
		Language  string            `json:"language,omitempty"`
		ContextID string            `json:"context_id,omitempty"`
		EnvVars   map[string]string `json:"env_vars,omitempty"`
	}{code, opts.Language, opts.ContextID, opts.EnvVars})
	if err != nil {
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.portURL(CodeInterpreterPort)+"/execute", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := s.portHTTP(CodeInterpreterPort).Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, readAPIError(res)
	}
	return readExecution(res)
}

// readExecution collects the NDJSON lines of an /execute stream up to
// end_of_execution.
func readExecution(res *http.Response) (*Execution, error) {
	ex := &Execution{Stdout: []string{}, Stderr: []string{}, Results: []CodeResult{}}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), maxExecutionLine)
	for sc.Scan() {
		var line struct {
			Type  string `json:"type"`
			Text  string `json:"text"`
			Count int    `json:"execution_count"`
			CodeError
			CodeResult
			IsMain bool `json:"is_main_result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, fmt.Errorf("decoding an output line: %w", err)
		}
		switch line.Type {
		case "stdout":
			ex.Stdout = append(ex.Stdout, line.Text)
		case "stderr":
			ex.Stderr = append(ex.Stderr, line.Text)
		case "result":
			r := line.CodeResult
			r.IsMain, r.Text = line.IsMain, line.Text
			ex.Results = append(ex.Results, r)
		case "error":
			e := line.CodeError
			ex.Error = &e
		case "number_of_executions":
			ex.Count = line.Count
		case "end_of_execution":
			return ex, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the output: %w", err)
	}
	return nil, errors.New("the output ended before end_of_execution")
}
