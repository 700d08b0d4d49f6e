package file_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// An event is what a run did with one row: emitted an item or
// dead-lettered a bad row, and the position after it.
type event struct {
	what string
	pos  string
}

// eventRecorder records a run's events in order: the items it emits and
// the bad rows its source dead-letters.
type eventRecorder[T any] struct {
	events []event
}

func (r *eventRecorder[T]) Emit(context.Context, T) error { panic("Emit") }
func (r *eventRecorder[T]) EmitTracked(context.Context, T, func(node.Outcome)) error {
	panic("EmitTracked")
}

func (r *eventRecorder[T]) EmitAt(_ context.Context, item T, pos []byte) error {
	r.events = append(r.events, event{fmt.Sprintf("item %#v", item), string(pos)})
	return nil
}

func (r *eventRecorder[T]) Write(_ context.Context, env deadletter.Envelope) error {
	r.events = append(r.events, event{fmt.Sprintf("bad %q: %s", env.Item, env.ErrText), string(env.Position)})
	return nil
}

// runEvents resumes src at pos and runs it, returning its events, or the
// run's error.
func runEvents[T any](src *file.Source[T], pos []byte) ([]event, error) {
	r := &eventRecorder[T]{}
	src.UseDeadLetter(r, deadletter.Envelope{OriginNode: "src"})
	if err := src.Resume(pos); err != nil {
		return nil, err
	}
	err := src.Run(context.Background(), r)
	return r.events, err
}

// checkResumes runs a source newSrc makes, then resumes a new one after
// each event (item or bad row), as a process that starts again does, and
// fails unless each resumed run does exactly the events after it.
func checkResumes[T any](t *testing.T, newSrc func() *file.Source[T]) {
	all, err := runEvents(newSrc(), nil)
	if err != nil {
		return // a bad CSV header, say: nothing to resume
	}
	for i, e := range all {
		rest, err := runEvents(newSrc(), []byte(e.pos))
		if err != nil {
			t.Fatalf("resume after event %d (%s): %v", i, e.what, err)
		}
		if len(rest) != len(all)-i-1 {
			t.Fatalf("resume after event %d (%s): %d events, want %d\nall:  %q\nrest: %q", i, e.what, len(rest), len(all)-i-1, all, rest)
		}
		for j := range rest {
			if rest[j] != all[i+1+j] {
				t.Fatalf("resume after event %d: event %d is %q, want %q", i, j, rest[j], all[i+1+j])
			}
		}
	}
}

func FuzzResumeAtEveryPosition(f *testing.F) {
	for _, s := range []string{
		"id,name\n1,ada\n2,\"bob\nsmith\"\n\n3\n4,x\"y\n",
		"\ufeffa;b\r\n1;2\r\n\"x\r\n",
		"{\"id\":1}\n\n{\"id\":\"x\"}\n {\"id\":3,\"sku\":\"c\"}",
		"",
		"\n\n\n",
		";", // more fields than bytes
	} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
		f.Add(s, uint8(2))
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, content string, kind uint8) {
		path := write(t, "in", content, false)
		switch kind % 4 {
		case 0:
			checkResumes(t, func() *file.Source[file.Record] { return file.CSV(path, file.CSVOptions{Header: true}) })
		case 1:
			checkResumes(t, func() *file.Source[file.Record] {
				return file.CSV(path, file.CSVOptions{Comma: ';', LazyQuotes: kind&4 != 0})
			})
		case 2:
			checkResumes(t, func() *file.Source[order] { return file.JSONL[order](path) })
		case 3:
			checkResumes(t, func() *file.Source[string] { return file.Lines(path) })
		}
	})
}
