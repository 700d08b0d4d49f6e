package checkpoint

import (
	"context"
	"sync"
)

// A Memory store keeps positions in the memory of one process, and
// forgets them when the process ends: use it in tests and examples, and
// [OpenFile] or checkpoint/sqlstore for a pipeline that must resume after
// a crash. It is safe for concurrent use. The zero Memory is an empty
// store, ready to use.
type Memory struct {
	mu  sync.Mutex
	pos map[pair][]byte
}

// pair names the position of one source of one pipeline.
type pair struct{ pipeline, source string }

// NewMemory returns an empty Memory store.
func NewMemory() *Memory { return &Memory{} }

// Load implements [Store.Load].
func (m *Memory) Load(ctx context.Context, pipeline, source string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pos[pair{pipeline, source}]
	if !ok {
		return nil, nil
	}
	return clone(p), nil
}

// Save implements [Store.Save].
func (m *Memory) Save(ctx context.Context, pipeline, source string, pos []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pos == nil {
		m.pos = make(map[pair][]byte)
	}
	m.pos[pair{pipeline, source}] = clone(pos)
	return nil
}

// clone copies p into a non-nil slice, so that an empty position loads as
// []byte{}, never as nil.
func clone(p []byte) []byte { return append(make([]byte, 0, len(p)), p...) }

var _ Store = (*Memory)(nil)
