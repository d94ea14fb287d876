package sandbox

import (
	"context"
	"fmt"
	"strings"
)

// Deleting a template (DeleteTemplate) must not pull its files from under
// a sandbox. What runs over them is in the store (live sandboxes and the
// snapshots of sandboxes, by template name) except the creates between
// their template lookup and their record, and the warm pools: creates
// hold the template's name in use (useTemplate) until they return, and a
// template with a warm pool is not deleted.

// useTemplate holds template name in use until release is called; it
// fails while the template is being deleted.
func (m *Manager) useTemplate(name string) (release func(), err error) {
	m.tmplMu.Lock()
	defer m.tmplMu.Unlock()
	if m.deleting[name] {
		return nil, invalid("template '%s' not found: it is being deleted", name)
	}
	m.tmplUse[name]++
	return func() {
		m.tmplMu.Lock()
		defer m.tmplMu.Unlock()
		if m.tmplUse[name]--; m.tmplUse[name] <= 0 {
			delete(m.tmplUse, name)
		}
	}, nil
}

// DeleteTemplate deletes template name with remove unless something runs
// over its files: a sandbox that is not killed, a snapshot of one of its
// sandboxes, a create in flight, or a warm pool. Then it answers ErrInvalid
// (E2B answers 400 too) naming what does, and removes nothing. Creates of
// the template fail while remove runs.
func (m *Manager) DeleteTemplate(ctx context.Context, name string, remove func(context.Context) error) error {
	m.tmplMu.Lock()
	switch {
	case m.deleting[name]:
		m.tmplMu.Unlock()
		return &userError{kind: ErrConflict, msg: fmt.Sprintf("template '%s' is being deleted already", name)}
	case m.tmplUse[name] > 0:
		m.tmplMu.Unlock()
		return invalid("cannot delete template '%s' because a sandbox is being created from it; retry when the create has returned", name)
	}
	m.deleting[name] = true
	m.tmplMu.Unlock()
	defer func() {
		m.tmplMu.Lock()
		delete(m.deleting, name)
		m.tmplMu.Unlock()
	}()

	m.mu.Lock()
	_, pooled := m.pools[name]
	m.mu.Unlock()
	if pooled {
		return invalid("cannot delete template '%s' because this server keeps a warm pool of it; start the server without it in --warm-pool first", name)
	}
	sandboxes, snapshots, err := m.cfg.Store.TemplateUsers(ctx, name)
	if err != nil {
		return err
	}
	if len(sandboxes) > 0 {
		return invalid("cannot delete template '%s' because there are running or paused sandboxes using it (%s); kill them first", name, few(sandboxes))
	}
	if len(snapshots) > 0 {
		return invalid("cannot delete template '%s' because snapshots of its sandboxes need it (%s); delete them first", name, few(snapshots))
	}
	return remove(ctx)
}

// few lists up to five of ids, and how many more there are.
func few(ids []string) string {
	if len(ids) <= 5 {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:5], ", "), len(ids)-5)
}
