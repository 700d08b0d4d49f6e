package main

import "sync"

// books counts, per item id (0, 1, 2, … as produced), its deliveries and
// its dead letters: two bytes per item, so that a run of millions of items
// keeps its seen-set in a few MB.
type books struct {
	mu        sync.Mutex
	delivered []uint8 // deliveries, capped at 255
	dead      []uint8 // dead letters, capped at 255
	accounted int     // items delivered or dead-lettered at least once
	// poison says which ids should be dead-lettered (the seed's poison
	// items); nil: none should.
	poison func(id int) bool
}

// reserve makes room for n items at once, so that a soak's heap does not
// step up each time the books double.
func (b *books) reserve(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > len(b.delivered) {
		b.delivered = append(b.delivered, make([]uint8, n-len(b.delivered))...)
		b.dead = append(b.dead, make([]uint8, n-len(b.dead))...)
	}
}

func (b *books) grow(id int) {
	if id >= len(b.delivered) {
		n := max(id+1, 2*len(b.delivered))
		b.delivered = append(b.delivered, make([]uint8, n-len(b.delivered))...)
		b.dead = append(b.dead, make([]uint8, n-len(b.dead))...)
	}
}

func (b *books) deliver(id int) {
	if id < 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.grow(id)
	if b.delivered[id] == 0 && b.dead[id] == 0 {
		b.accounted++
	}
	if b.delivered[id] < 255 {
		b.delivered[id]++
	}
}

func (b *books) deadLetter(id int) {
	if id < 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.grow(id)
	if b.delivered[id] == 0 && b.dead[id] == 0 {
		b.accounted++
	}
	if b.dead[id] < 255 {
		b.dead[id]++
	}
}

// done returns how many items are accounted for.
func (b *books) done() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.accounted
}

// account closes the books of the items 0 … in-1.
func (b *books) account(name string, in int, atLeastOnce bool) account {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := account{pipeline: name, in: in, atLeastOnce: atLeastOnce}
	for id := range b.delivered {
		d, dn := int(b.delivered[id]), int(b.dead[id])
		dead := dn > 0
		if id >= in && (d > 0 || dead) {
			a.strays++ // never produced, yet seen
			continue
		}
		if d > 0 {
			a.out++
			a.duplicates += d - 1
		}
		if dead {
			a.dead++
			a.deadRepeats += dn - 1
		}
		if poison := b.poison != nil && b.poison(id); id < in && dead != poison {
			a.wrongDead++ // a good item dead-lettered, or a poison one not
		}
		if d > 0 && dead {
			a.both++
		}
	}
	return a
}
