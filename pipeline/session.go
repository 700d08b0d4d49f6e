package pipeline

import (
	"slices"
	"time"
)

// SessionWindow is a window of a key's items that follow each other by
// less than gap: a session opens with an item, takes every item of the
// key that comes within gap of its last one, and ends gap after its last
// item, [first item, last item + gap). On [EventTime], an item that falls
// between two sessions of its key, within gap of both, joins them into
// one: its value is add over their items again, from init().
//
// A session window keeps its items until it is handed on. Build rejects
// [AllowedLateness] on it: a late item could join a session handed on
// with one still open.
func SessionWindow(gap time.Duration) WindowSpec {
	return WindowSpec{gap: gap, session: true, made: madeBySession}
}

// placeSession adds env, of time t, to its key's session: the one it
// falls in or within gap of, or a new one. The sessions it joins become
// one, the earliest's, their items added again.
func (a *aggregator[T, K, A]) placeSession(env envelope[T], k K, t time.Time) error {
	var joins []windowID[K]
	for _, id := range a.sessions[k] {
		w := a.wins[id].win
		// The item's own span [t, t+gap) meets the session's.
		if t.Before(w.End) && w.Start.Before(t.Add(a.spec.gap)) {
			joins = append(joins, id)
		}
	}
	if len(joins) == 0 {
		a.serial++
		id := windowID[K]{key: k, start: a.serial}
		a.wins[id] = &openWindow[T, K, A]{win: Window[K, A]{Key: k, Value: a.add(a.init(), env.val), Count: 1,
			Start: t, End: t.Add(a.spec.gap)}, items: []envelope[T]{env}}
		a.sessions[k] = append(a.sessions[k], id)
		a.insert(id)
		return nil
	}
	slices.SortFunc(joins, func(x, y windowID[K]) int { return a.wins[x].win.Start.Compare(a.wins[y].win.Start) })
	id := joins[0]
	w := a.wins[id]
	w.items = append(w.items, env)
	if t.Before(w.win.Start) {
		w.win.Start = t
	}
	if end := t.Add(a.spec.gap); end.After(w.win.End) {
		w.win.End = end
	}
	if len(joins) == 1 {
		w.win.Value = a.add(w.win.Value, env.val)
		w.win.Count++
	} else {
		for _, o := range joins[1:] {
			ow := a.wins[o]
			w.items = append(w.items, ow.items...)
			w.win.End = maxTime(w.win.End, ow.win.End)
			a.forgetSession(o)
			a.unorder(o)
			delete(a.wins, o)
		}
		// Added again, one session after the other: add has no way to
		// join two values.
		w.win.Value, w.win.Count = a.init(), len(w.items)
		for _, it := range w.items {
			w.win.Value = a.add(w.win.Value, it.val)
		}
	}
	// Its End moved: back in the order by End.
	a.unorder(id)
	a.insert(id)
	return nil
}

// forgetSession takes session id out of its key's open sessions.
func (a *aggregator[T, K, A]) forgetSession(id windowID[K]) {
	s := a.sessions[id.key]
	if i := slices.Index(s, id); i >= 0 {
		s = slices.Delete(s, i, i+1)
	}
	if len(s) == 0 {
		delete(a.sessions, id.key)
		return
	}
	a.sessions[id.key] = s
}

// unorder takes window id out of the order.
func (a *aggregator[T, K, A]) unorder(id windowID[K]) {
	if i := slices.Index(a.order, id); i >= 0 {
		a.order = slices.Delete(a.order, i, i+1)
	}
}

func maxTime(x, y time.Time) time.Time {
	if y.After(x) {
		return y
	}
	return x
}
