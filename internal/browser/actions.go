package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
)

// PageError is an action the page cannot do: no element matches the
// selector, a ref names no node of the page, navigation failed, a wait
// timed out.
type PageError struct{ Msg string }

func (e *PageError) Error() string { return e.Msg }

func pageErr(format string, args ...any) error {
	return &PageError{Msg: fmt.Sprintf(format, args...)}
}

// Session is the attachment to a sandbox's page. Actions run one at a
// time; the live view's screencast and input (Watch) run beside them.
type Session struct {
	conn *conn
	act  sync.Mutex // held by the action in progress
	cast screencast // the live view's, apart from the actions

	mu       sync.Mutex // guards loads and inflight, counted from the page's events
	loads    int        // load events of the main frame so far
	inflight map[string]bool
	lastNet  time.Time // when inflight last changed
	// loadsBefore is loads when the previous action started: wait for
	// navigation waits for a load after it. Guarded by act.
	loadsBefore, loadsAtStart int
}

func newSession(c *conn) *Session {
	return &Session{conn: c, inflight: map[string]bool{}, lastNet: time.Now(),
		cast: screencast{conn: c, watchers: map[*Watcher]struct{}{}}}
}

// enable turns on the domains whose events wait watches, and starts
// counting those events until the connection ends.
func (s *Session) enable(ctx context.Context) error {
	// One ordered stream: on separate channels a request's end could be
	// counted before its start, leaving it in flight for good.
	events, cancel := s.conn.Events(page.LoadEventFired.Method,
		network.RequestWillBeSent.Method, network.LoadingFinished.Method, network.LoadingFailed.Method)
	go func() {
		defer cancel()
		for {
			select {
			case ev := <-events:
				s.count(ev)
			case <-s.conn.done:
				return
			}
		}
	}()
	for _, method := range []string{page.CommandEnable, network.CommandEnable} {
		if err := s.conn.Call(ctx, method, struct{}{}, nil); err != nil {
			return err
		}
	}
	return nil
}

// count counts a load of the page or a request starting or ending.
func (s *Session) count(ev Event) {
	if ev.Method == page.LoadEventFired.Method {
		s.mu.Lock()
		s.loads++
		s.mu.Unlock()
		return
	}
	var req struct {
		RequestID string `json:"requestId"`
	}
	if json.Unmarshal(ev.Params, &req) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Method == network.RequestWillBeSent.Method {
		s.inflight[req.RequestID] = true
	} else {
		delete(s.inflight, req.RequestID)
	}
	s.lastNet = time.Now()
}

// Result is what an action answers; only the fields of the action are set.
type Result struct {
	URL   string `json:"url,omitempty"`
	Title string `json:"title,omitempty"`
	Text  string `json:"text,omitempty"`
	HTML  string `json:"html,omitempty"`
	Links []Link `json:"links,omitempty"`
	Tree  *Node  `json:"tree,omitempty"`
	// MimeType and Data are screenshot's PNG and pdf's PDF, base64.
	MimeType string `json:"mimeType,omitempty"`
	Data     []byte `json:"data,omitempty"`
}

// Link is a link of the page.
type Link struct {
	Text string `json:"text"`
	Href string `json:"href"`
}

// Do performs a, which DecodeAction checked.
func (s *Session) Do(ctx context.Context, a Action) (Result, error) {
	s.act.Lock()
	defer s.act.Unlock()
	s.mu.Lock()
	s.loadsBefore, s.loadsAtStart = s.loadsAtStart, s.loads
	s.mu.Unlock()
	switch a.Action {
	case "navigate":
		return s.navigate(ctx, a)
	case "click":
		return Result{}, s.click(ctx, a)
	case "fill":
		return Result{}, s.fill(ctx, a)
	case "select":
		return Result{}, s.onElement(ctx, a, selectJS, *a.Value)
	case "press":
		return Result{}, s.press(ctx, a.Key)
	case "scroll":
		if a.Selector != "" || a.Ref != "" {
			return Result{}, s.onElement(ctx, a, `function() { this.scrollIntoView({block: 'center'}); return '' }`)
		}
		_, err := s.eval(ctx, fmt.Sprintf("window.scrollBy(%g, %g)", a.DeltaX, a.DeltaY))
		return Result{}, err
	case "wait":
		return Result{}, s.wait(ctx, a)
	case "extract":
		return s.extract(ctx, a)
	case "screenshot":
		res, err := cdp.Call(ctx, s.conn, page.CaptureScreenshot, page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng})
		return Result{MimeType: "image/png", Data: res.Data}, err
	case "pdf":
		res, err := cdp.Call(ctx, s.conn, page.PrintToPDF, page.PrintToPDFParams{})
		return Result{MimeType: "application/pdf", Data: res.Data}, err
	}
	return Result{}, badField("action", "%q is not an action", a.Action)
}

func (s *Session) navigate(ctx context.Context, a Action) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	loads, stop := s.conn.Subscribe(page.LoadEventFired.Method)
	defer stop()
	res, err := cdp.Call(ctx, s.conn, page.Navigate, page.NavigateParams{URL: a.URL})
	if err != nil && ctx.Err() != nil {
		return Result{}, pageErr("%s did not load within %s", a.URL, a.timeout())
	}
	if err != nil {
		return Result{}, err
	}
	if res.ErrorText != "" {
		return Result{}, pageErr("navigating to %s: %s", a.URL, res.ErrorText)
	}
	if res.LoaderID != "" { // a new document: wait for it to load
		select {
		case <-loads:
		case <-ctx.Done():
			return Result{}, pageErr("%s did not load within %s", a.URL, a.timeout())
		}
	}
	var where struct{ URL, Title string }
	raw, err := s.eval(ctx, "({URL: location.href, Title: document.title})")
	if err != nil {
		return Result{}, err
	}
	_ = json.Unmarshal(raw, &where)
	return Result{URL: where.URL, Title: where.Title}, nil
}

// click presses and releases the left button at a's point, or at the
// middle of a's element, scrolled into view.
func (s *Session) click(ctx context.Context, a Action) error {
	var x, y float64
	if a.X != nil {
		x, y = *a.X, *a.Y
	} else {
		obj, err := s.element(ctx, a)
		if err != nil {
			return err
		}
		raw, err := s.callOn(ctx, obj, `function() {
			this.scrollIntoView({block: 'center', inline: 'center'})
			const r = this.getBoundingClientRect()
			return [r.x + r.width / 2, r.y + r.height / 2, r.width * r.height]
		}`)
		if err != nil {
			return err
		}
		var p [3]float64
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("reading the element's box: %w", err)
		}
		if p[2] == 0 {
			return pageErr("%s is not visible (it has no area to click)", a.target())
		}
		x, y = p[0], p[1]
	}
	for _, t := range []input.DispatchMouseEventType{input.DispatchMouseEventTypeMouseMoved, input.DispatchMouseEventTypeMousePressed, input.DispatchMouseEventTypeMouseReleased} {
		ev := input.DispatchMouseEventParams{Type: t, X: x, Y: y}
		if t != input.DispatchMouseEventTypeMouseMoved {
			ev.Button, ev.ClickCount = input.MouseButtonLeft, 1
		}
		if _, err := cdp.Call(ctx, s.conn, input.DispatchMouseEvent, ev); err != nil {
			return err
		}
	}
	return nil
}

// fill focuses a's element, clears it, and types a's value into it as
// text input (so the page sees input events).
func (s *Session) fill(ctx context.Context, a Action) error {
	if err := s.onElement(ctx, a, `function() {
		if (!('value' in this) && !this.isContentEditable) return 'it takes no text'
		this.focus()
		if ('value' in this) { this.value = ''; this.dispatchEvent(new Event('input', {bubbles: true})) }
		else this.textContent = ''
		return ''
	}`); err != nil {
		return err
	}
	if *a.Value == "" {
		return nil
	}
	_, err := cdp.Call(ctx, s.conn, input.InsertText, input.InsertTextParams{Text: *a.Value})
	return err
}

// selectJS picks the option whose value or label is its argument.
const selectJS = `function(v) {
	if (this.tagName !== 'SELECT') return 'it is not a select element'
	const o = [...this.options].find((o) => o.value === v || o.label === v)
	if (!o) return 'it has no option ' + JSON.stringify(v)
	this.value = o.value
	this.dispatchEvent(new Event('input', {bubbles: true}))
	this.dispatchEvent(new Event('change', {bubbles: true}))
	return ''
}`

// onElement runs fn on a's element; fn answers "" or why it cannot.
func (s *Session) onElement(ctx context.Context, a Action, fn string, args ...any) error {
	obj, err := s.element(ctx, a)
	if err != nil {
		return err
	}
	raw, err := s.callOn(ctx, obj, fn, args...)
	if err != nil {
		return err
	}
	var why string
	if json.Unmarshal(raw, &why) == nil && why != "" {
		return pageErr("%s: %s", a.target(), why)
	}
	return nil
}

// target describes a's element for errors.
func (a Action) target() string {
	if a.Ref != "" {
		return "ref " + a.Ref
	}
	return "selector " + strconv.Quote(a.Selector)
}

// element resolves a's selector or ref to a remote object.
func (s *Session) element(ctx context.Context, a Action) (runtime.RemoteObjectID, error) {
	if a.Ref != "" {
		id, _ := parseRef(a.Ref) // checked by DecodeAction
		res, err := cdp.Call(ctx, s.conn, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: id})
		if err != nil || res.Object == nil || res.Object.ObjectID == "" {
			return "", pageErr("ref %s names no node of the page (refs hold until the page changes document)", a.Ref)
		}
		return res.Object.ObjectID, nil
	}
	sel, _ := json.Marshal(a.Selector)
	res, err := cdp.Call(ctx, s.conn, runtime.Evaluate, runtime.EvaluateParams{Expression: "document.querySelector(" + string(sel) + ")"})
	if err != nil {
		return "", err
	}
	if res.ExceptionDetails != nil {
		return "", &InputError{Field: "selector", Msg: fmt.Sprintf("%q is not a valid CSS selector", a.Selector)}
	}
	if res.Result == nil || res.Result.ObjectID == "" {
		return "", pageErr("no element matches selector %q", a.Selector)
	}
	return res.Result.ObjectID, nil
}

// callOn calls fn with this bound to obj and answers its value as JSON.
func (s *Session) callOn(ctx context.Context, obj runtime.RemoteObjectID, fn string, args ...any) (jsonv2.Value, error) {
	params := runtime.CallFunctionOnParams{FunctionDeclaration: fn, ObjectID: obj, ReturnByValue: ptr(true)}
	for _, arg := range args {
		raw, _ := json.Marshal(arg) // strings only
		params.Arguments = append(params.Arguments, &runtime.CallArgument{Value: raw})
	}
	res, err := cdp.Call(ctx, s.conn, runtime.CallFunctionOn, params)
	return value(res.Result, res.ExceptionDetails, err)
}

// eval evaluates expr in the page and answers its value as JSON.
func (s *Session) eval(ctx context.Context, expr string) (jsonv2.Value, error) {
	res, err := cdp.Call(ctx, s.conn, runtime.Evaluate, runtime.EvaluateParams{Expression: expr, ReturnByValue: ptr(true), AwaitPromise: ptr(true)})
	return value(res.Result, res.ExceptionDetails, err)
}

func value(obj *runtime.RemoteObject, exc *runtime.ExceptionDetails, err error) (jsonv2.Value, error) {
	if err != nil {
		return nil, err
	}
	if exc != nil {
		why := exc.Text
		if exc.Exception != nil && exc.Exception.Description != "" {
			why = exc.Exception.Description
		}
		return nil, pageErr("the page's script threw: %s", why)
	}
	if obj == nil {
		return nil, nil
	}
	return obj.Value, nil
}

func ptr[T any](v T) *T { return &v }

// press presses and releases key.
func (s *Session) press(ctx context.Context, key string) error {
	ev, err := keyEvent(key)
	if err != nil {
		return err
	}
	down := ev
	down.Type = input.DispatchKeyEventTypeKeyDown
	if down.Text == "" {
		down.Type = input.DispatchKeyEventTypeRawKeyDown
	}
	up := ev
	up.Type, up.Text = input.DispatchKeyEventTypeKeyUp, ""
	for _, e := range []input.DispatchKeyEventParams{down, up} {
		if _, err := cdp.Call(ctx, s.conn, input.DispatchKeyEvent, e); err != nil {
			return err
		}
	}
	return nil
}

// namedKeys are the keys press knows by name: code, virtual key code, and
// the text the key types.
var namedKeys = map[string]struct {
	code string
	vk   int64
	text string
}{
	"Enter": {"Enter", 13, "\r"}, "Tab": {"Tab", 9, "\t"}, "Escape": {"Escape", 27, ""},
	"Backspace": {"Backspace", 8, ""}, "Delete": {"Delete", 46, ""}, " ": {"Space", 32, " "},
	"ArrowUp": {"ArrowUp", 38, ""}, "ArrowDown": {"ArrowDown", 40, ""},
	"ArrowLeft": {"ArrowLeft", 37, ""}, "ArrowRight": {"ArrowRight", 39, ""},
	"Home": {"Home", 36, ""}, "End": {"End", 35, ""}, "PageUp": {"PageUp", 33, ""}, "PageDown": {"PageDown", 34, ""},
}

// keyEvent is the event of key: a named key or one printable character.
func keyEvent(key string) (input.DispatchKeyEventParams, error) {
	if k, ok := namedKeys[key]; ok {
		return input.DispatchKeyEventParams{Key: key, Code: k.code, WindowsVirtualKeyCode: k.vk, Text: k.text}, nil
	}
	if r := []rune(key); len(r) == 1 && r[0] >= ' ' {
		return input.DispatchKeyEventParams{Key: key, Text: key}, nil
	}
	names := make([]string, 0, len(namedKeys))
	for n := range namedKeys {
		names = append(names, strconv.Quote(n))
	}
	return input.DispatchKeyEventParams{}, badField("key", "%q is not one character or a key name (%s)", key, strings.Join(names, ", "))
}

// wait waits for a's condition, polling the page.
func (s *Session) wait(ctx context.Context, a Action) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout())
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := s.waited(ctx, a)
		switch {
		case ctx.Err() != nil: // the deadline, perhaps cutting the probe short
			return pageErr("wait for %s: not within %s", a.For, a.timeout())
		case err != nil || done:
			return err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// networkQuiet is how long the page must have no request in flight to be
// network idle.
const networkQuiet = 500 * time.Millisecond

// waited reports whether a's condition holds.
func (s *Session) waited(ctx context.Context, a Action) (bool, error) {
	switch a.For {
	case "selector":
		sel, _ := json.Marshal(a.Selector)
		raw, err := s.eval(ctx, "document.querySelector("+string(sel)+") !== null")
		if err != nil {
			var pe *PageError
			if errors.As(err, &pe) {
				return false, &InputError{Field: "selector", Msg: fmt.Sprintf("%q is not a valid CSS selector", a.Selector)}
			}
			return false, err
		}
		return string(raw) == "true", nil
	case "navigation":
		// A load after the previous action started: the one a click or
		// press began, even if it is over by now.
		s.mu.Lock()
		loaded := s.loads > s.loadsBefore
		s.mu.Unlock()
		return loaded, nil
	default: // networkIdle
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.inflight) == 0 && time.Since(s.lastNet) >= networkQuiet, nil
	}
}

// extractJS are the page scripts of extract, functions of the element's
// selector (null for the whole page).
var extractJS = map[string]string{
	"text":  "((sel) => (document.querySelector(sel ?? 'body') ?? {innerText: null}).innerText)",
	"html":  "((sel) => (sel === null ? document.documentElement : document.querySelector(sel) ?? {outerHTML: null}).outerHTML)",
	"links": "(() => [...document.links].map((a) => ({text: a.innerText.trim(), href: a.href})))",
}

func (s *Session) extract(ctx context.Context, a Action) (Result, error) {
	if a.Format == "accessibility" {
		tree, err := s.accessibilityTree(ctx)
		return Result{Tree: tree}, err
	}
	sel := []byte("null")
	if a.Selector != "" {
		sel, _ = json.Marshal(a.Selector)
	}
	raw, err := s.eval(ctx, extractJS[a.Format]+"("+string(sel)+")")
	if err != nil {
		return Result{}, err
	}
	var res Result
	switch a.Format {
	case "links":
		err = json.Unmarshal(raw, &res.Links)
	case "text", "html":
		var text *string
		err = json.Unmarshal(raw, &text)
		if err == nil && text == nil {
			return Result{}, pageErr("no element matches selector %q", a.Selector)
		}
		if err == nil && a.Format == "text" {
			res.Text = *text
		} else if err == nil {
			res.HTML = *text
		}
	}
	if err != nil {
		return Result{}, fmt.Errorf("reading the page's %s: %w", a.Format, err)
	}
	return res, nil
}

// Node is a node of the accessibility tree. Ref names its DOM node to the
// actions that take a ref, as long as the page keeps its document.
type Node struct {
	Ref      string  `json:"ref,omitempty"`
	Role     string  `json:"role"`
	Name     string  `json:"name,omitempty"`
	Value    string  `json:"value,omitempty"`
	Children []*Node `json:"children,omitempty"`
}

// refPrefix starts a ref; the rest is the node's backend DOM node id,
// which Chromium keeps for a node as long as the node lives.
const refPrefix = "e"

func parseRef(ref string) (cdp.BackendNodeID, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(ref, refPrefix), 10, 64)
	if !strings.HasPrefix(ref, refPrefix) || err != nil || n <= 0 {
		return 0, badField("ref", "%q is not a ref of extract's accessibility tree (e<number>)", ref)
	}
	return cdp.BackendNodeID(n), nil
}

// accessibilityTree answers the page's accessibility tree without the
// nodes Chromium ignores and the unnamed generic containers, whose
// children take their place.
func (s *Session) accessibilityTree(ctx context.Context) (*Node, error) {
	res, err := cdp.Call(ctx, s.conn, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
	if err != nil {
		return nil, err
	}
	return buildTree(res.Nodes), nil
}

// buildTree builds the tree of nodes, rooted at the first.
func buildTree(nodes []*accessibility.Node) *Node {
	if len(nodes) == 0 {
		return nil
	}
	byID := make(map[accessibility.NodeID]*accessibility.Node, len(nodes))
	for _, n := range nodes {
		byID[n.NodeID] = n
	}
	var build func(n *accessibility.Node) []*Node
	build = func(n *accessibility.Node) []*Node {
		var kids []*Node
		for _, id := range n.ChildIDs {
			if c, ok := byID[id]; ok {
				kids = append(kids, build(c)...)
			}
		}
		role, name := axString(n.Role), axString(n.Name)
		if n.Ignored || role == "InlineTextBox" || ((role == "generic" || role == "none") && name == "") {
			return kids
		}
		out := &Node{Role: role, Name: name, Value: axString(n.Value), Children: kids}
		if n.BackendDOMNodeID != 0 {
			out.Ref = refPrefix + strconv.FormatInt(int64(n.BackendDOMNodeID), 10)
		}
		return []*Node{out}
	}
	top := build(nodes[0])
	if len(top) == 1 {
		return top[0]
	}
	return &Node{Role: "RootWebArea", Children: top}
}

// axString is v's value as text: strings as they are, other JSON values
// as written.
func axString(v *accessibility.Value) string {
	if v == nil || len(v.Value) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(v.Value, &s) == nil {
		return s
	}
	return string(v.Value)
}
