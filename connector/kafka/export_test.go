package kafka

import "github.com/twmb/franz-go/pkg/kgo"

// AddClientOpts gives s's clients more options, for tests that need the
// client to behave in a way no setting asks for (fetching a batch at a
// time, say).
func AddClientOpts(s *Source, opts ...kgo.Opt) { s.opts = append(s.opts, opts...) }

// HeldInTiers returns how many tier records the source's due gate holds,
// not yet due.
func HeldInTiers(s *Source) int {
	t := s.tierRun()
	if t == nil {
		return 0
	}
	return t.gate.heldCount()
}

// PublisherLocked reports whether a writer holds the publisher's lock, or
// waits for it: a record produced alone, or Close.
func PublisherLocked[T any](p *Publisher[T]) bool {
	if p.core.mu.TryRLock() {
		p.core.mu.RUnlock()
		return false
	}
	return true
}

// PublisherClosed reports whether Close took the publisher's client away.
func PublisherClosed[T any](p *Publisher[T]) bool {
	p.core.mu.RLock()
	defer p.core.mu.RUnlock()
	return p.core.cl == nil
}
