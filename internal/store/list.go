package store

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Order is the sort order of a sandbox list, by start time.
type Order string

// List orders; the zero Order means OrderDesc.
const (
	OrderDesc Order = "desc" // newest first
	OrderAsc  Order = "asc"  // oldest first
)

// Page size bounds of ListSandboxes.
const (
	DefaultListLimit = 100
	MaxListLimit     = 100
)

// ListQuery selects sandboxes for ListSandboxes. The zero value lists running
// and paused sandboxes, newest first, 100 per page.
type ListQuery struct {
	// States to include; empty means running and paused. Killed sandboxes
	// are only listed when asked for here.
	States []State
	// Metadata must all match: a sandbox is listed only if it has every
	// key with exactly the given value.
	Metadata map[string]string
	// TemplateID matches a sandbox's template ID or its alias.
	TemplateID string
	// StartedAfter is an inclusive lower bound on StartedAt, compared at
	// millisecond precision (the precision the SDKs send).
	StartedAfter time.Time
	// Order by start time, ties broken by ID; empty means OrderDesc.
	Order Order
	// Limit is the page size: 0 means DefaultListLimit, others are clamped
	// to 1..MaxListLimit.
	Limit int
	// NextToken continues a previous listing with the same query.
	NextToken string
}

// cursor is the decoded form of a page token: the last sandbox returned.
type cursor struct {
	startedAt int64 // unix ns
	id        string
	order     Order
}

// tokenVersion prefixes tokens so their format can change later.
const tokenVersion = "v1"

func (c cursor) encode() string {
	s := tokenVersion + "." + strconv.FormatInt(c.startedAt, 10) + "." + string(c.order) + "." + c.id
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func decodeCursor(tok string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return cursor{}, ErrInvalidToken
	}
	// The id is last so it may contain any character.
	parts := strings.SplitN(string(b), ".", 4)
	if len(parts) != 4 || parts[0] != tokenVersion || parts[3] == "" {
		return cursor{}, ErrInvalidToken
	}
	ns, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return cursor{}, ErrInvalidToken
	}
	o := Order(parts[2])
	if o != OrderAsc && o != OrderDesc {
		return cursor{}, ErrInvalidToken
	}
	return cursor{startedAt: ns, id: parts[3], order: o}, nil
}

// ListSandboxes returns one page of the sandboxes matching q (never nil)
// and the token for the next page, which is empty when no further page
// exists. A token that
// cannot be decoded, or was issued for the other order, gives an error
// wrapping ErrInvalidToken; an unknown state or order gives ErrInvalid.
func (s *Store) ListSandboxes(ctx context.Context, q ListQuery) ([]Sandbox, string, error) {
	order := q.Order
	switch order {
	case "":
		order = OrderDesc
	case OrderAsc, OrderDesc:
	default:
		return nil, "", fmt.Errorf("listing sandboxes: order %q: %w", q.Order, ErrInvalid)
	}
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultListLimit
	case limit < 1:
		limit = 1
	case limit > MaxListLimit:
		limit = MaxListLimit
	}
	states := q.States
	if len(states) == 0 {
		states = []State{StateRunning, StatePaused}
	}

	var (
		where []string
		args  []any
	)
	stateWhere, stateArgs, err := stateIn(states)
	if err != nil {
		return nil, "", fmt.Errorf("listing sandboxes: %w", err)
	}
	where, args = append(where, stateWhere), append(args, stateArgs...)
	if q.TemplateID != "" {
		where = append(where, "(template_id = ? OR alias = ?)")
		args = append(args, q.TemplateID, q.TemplateID)
	}
	if !q.StartedAfter.IsZero() {
		bound, err := toNanos(q.StartedAfter.Truncate(time.Millisecond))
		if err != nil {
			return nil, "", fmt.Errorf("listing sandboxes: started-after bound: %w", err)
		}
		where = append(where, "started_at >= ?")
		args = append(args, bound)
	}
	for k, v := range q.Metadata {
		where = append(where, `EXISTS (SELECT 1 FROM json_each(sandboxes.metadata) AS m
			WHERE m.key = ? AND m.type = 'text' AND m.value = ?)`)
		args = append(args, k, v)
	}
	cmp, dir := "<", "DESC"
	if order == OrderAsc {
		cmp, dir = ">", "ASC"
	}
	if q.NextToken != "" {
		c, err := decodeCursor(q.NextToken)
		if err != nil || c.order != order {
			return nil, "", fmt.Errorf("listing sandboxes: %w", ErrInvalidToken)
		}
		where = append(where, "(started_at, id) "+cmp+" (?, ?)")
		args = append(args, c.startedAt, c.id)
	}

	// Fetch one extra row to learn whether another page exists.
	query := `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY started_at ` + dir + `, id ` + dir + ` LIMIT ?`
	args = append(args, limit+1)
	out, err := s.querySandboxes(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("listing sandboxes: %w", err)
	}
	if len(out) <= limit {
		return out, "", nil
	}
	out = out[:limit]
	last := out[limit-1]
	return out, cursor{startedAt: last.StartedAt.UnixNano(), id: last.ID, order: order}.encode(), nil
}

// ListSandboxesByState returns every sandbox in one of states (every
// sandbox when states is empty), oldest first. It is meant for reconcile
// after a restart, for example with every state but killed.
func (s *Store) ListSandboxesByState(ctx context.Context, states ...State) ([]Sandbox, error) {
	query := `SELECT ` + sandboxColumns + ` FROM sandboxes`
	var args []any
	if len(states) > 0 {
		w, a, err := stateIn(states)
		if err != nil {
			return nil, fmt.Errorf("listing sandboxes by state: %w", err)
		}
		query += ` WHERE ` + w
		args = a
	}
	out, err := s.querySandboxes(ctx, query+` ORDER BY started_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes by state: %w", err)
	}
	return out, nil
}

// stateIn builds "state IN (?, ...)" for states, validating each.
func stateIn(states []State) (string, []any, error) {
	args := make([]any, len(states))
	for i, st := range states {
		if !st.Valid() {
			return "", nil, fmt.Errorf("state %q: %w", st, ErrInvalid)
		}
		args[i] = string(st)
	}
	return "state IN (" + placeholders(len(states)) + ")", args, nil
}

func (s *Store) querySandboxes(ctx context.Context, query string, args ...any) ([]Sandbox, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Sandbox{} // never nil: an empty list encodes as [] in JSON
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, rows.Err()
}
