package pipeline

import "testing"

// The kind table describes every kind, and only the kinds: a kind added
// to observer without a row here would have none of the abilities.
func TestKindTableCoversEveryKind(t *testing.T) {
	t.Parallel()
	if got, want := len(kinds), len(NodeKinds())+1; got != want {
		t.Fatalf("the table has %d rows, want %d (the zero kind and one per kind)", got, want)
	}
	for _, k := range NodeKinds() {
		if infoOf(k).plural == "" {
			t.Errorf("kind %s has no row in the table", k)
		}
	}
	if ki := infoOf(0); *ki != (kindInfo{}) {
		t.Errorf("the zero kind has abilities: %+v", *ki)
	}
	if ki := infoOf(NodeKind(len(kinds))); *ki != (kindInfo{}) {
		t.Errorf("a kind past the table has abilities: %+v", *ki)
	}
}

// The abilities imply one another as the runtime assumes: a node whose
// function can fail calls the user and is retried; one that is Keyed runs
// workers; a rate limit limits calls of the user's code on items read.
func TestKindTableIsConsistent(t *testing.T) {
	t.Parallel()
	for _, k := range NodeKinds() {
		ki := infoOf(k)
		if ki.consumes == (k == KindSource) {
			t.Errorf("%s: consumes = %v: all kinds but sources read an input", k, ki.consumes)
		}
		if ki.fallible && !(ki.callsUser && ki.nodeRetried && ki.decides) {
			t.Errorf("%s: fallible, but not callsUser, nodeRetried and decides: %+v", k, *ki)
		}
		if ki.keyed && !ki.parallel {
			t.Errorf("%s: keyed but not parallel", k)
		}
		if ki.rateLimited && !(ki.callsUser && ki.consumes) {
			t.Errorf("%s: rateLimited, but calls no user function on items it reads", k)
		}
		if ki.fallback && !ki.fallible {
			t.Errorf("%s: takes a Fallback but calls nothing that fails", k)
		}
	}
}

func TestKindsThatListsInKindOrder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		has  func(*kindInfo) bool
		want string
	}{
		{func(k *kindInfo) bool { return k.keyed }, "transforms, sinks, filters and flat maps"},
		{func(k *kindInfo) bool { return k.parallel }, "transforms, sinks, filters, flat maps and routes"},
		{func(k *kindInfo) bool { return k.fallback }, "transforms"},
		{func(k *kindInfo) bool { return !k.consumes }, "sources"},
		{func(*kindInfo) bool { return false }, "none"},
	} {
		if got := kindsThat(c.has); got != c.want {
			t.Errorf("kindsThat = %q, want %q", got, c.want)
		}
	}
}

// A tagging transform of a Join calls nothing that fails: the spec's
// abilities take it out of the table's transform row.
func TestTaggingTransformIsNotFallible(t *testing.T) {
	t.Parallel()
	for _, n := range []*spec{{kind: KindTransform, tagging: true}, {kind: KindMerge}} {
		if n.fallible() || n.nodeRetried() || n.decides() || callsUser(n) {
			t.Errorf("%s (tagging %v): fallible %v, nodeRetried %v, decides %v, callsUser %v",
				n.kind, n.tagging, n.fallible(), n.nodeRetried(), n.decides(), callsUser(n))
		}
	}
	if n := (&spec{kind: KindTransform}); !n.fallible() || !n.nodeRetried() || !n.decides() || !callsUser(n) {
		t.Errorf("a transform lacks an ability")
	}
	if n := (&spec{kind: KindSource}); n.fallible() || !n.nodeRetried() || n.decides() {
		t.Errorf("a source: fallible %v, nodeRetried %v, decides %v", n.fallible(), n.nodeRetried(), n.decides())
	}
}
