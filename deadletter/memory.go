package deadletter

import (
	"context"
	"slices"
	"sync"
)

// A Memory sink keeps envelopes in memory, up to a capacity. It suits tests
// and small programs; it loses everything when the process ends.
type Memory struct {
	mu        sync.Mutex
	capacity  int
	envelopes []Envelope
}

// NewMemory returns an empty Memory sink that holds at most capacity
// envelopes; a capacity of 0 or less holds none.
func NewMemory(capacity int) *Memory {
	return &Memory{capacity: max(capacity, 0)}
}

// Write keeps env, or returns [ErrFull] when the sink holds capacity
// envelopes already.
func (m *Memory) Write(_ context.Context, env Envelope) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.envelopes) >= m.capacity {
		return ErrFull
	}
	m.envelopes = append(m.envelopes, env)
	return nil
}

// Envelopes returns a copy of the envelopes written so far, in order.
func (m *Memory) Envelopes() []Envelope {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.envelopes)
}

// Len returns how many envelopes the sink holds.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.envelopes)
}
