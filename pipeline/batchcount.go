package pipeline

import (
	"reflect"
	"unsafe"
)

// Counting items through Batch: a stream that carries batches (the output
// of a Batch, and of the nodes that pass batches on) is counted in the
// items the batches hold, so that a node's In and Out read the same after
// a Batch as before it; InBatches and OutBatches count the batches.
//
// A node takes batches when every stream it reads carries them. It then
// counts In, Failed, Skipped, DeadLettered, BrokerRetries, Filtered and HandedOff in
// items. It gives batches when its output carries them: a Batch, and a
// Transform, Filter, Merge, Route or branch that takes batches and hands
// on a slice; it then counts Out in items.

// sliceLen returns a function that gives the length of a T, when T is a
// slice type, and nil otherwise. Every slice has the same header, whose
// length a []struct{} reads without copying or allocating.
func sliceLen[T any]() func(T) int {
	if reflect.TypeFor[T]().Kind() != reflect.Slice {
		return nil
	}
	return func(v T) int { return len(*(*[]struct{})(unsafe.Pointer(&v))) }
}

// takesBatches reports whether every stream s reads carries batches.
func (s *spec) takesBatches() bool {
	for _, in := range s.inputs {
		if in == nil || in.producer == nil || !in.producer.givesBatches {
			return false
		}
	}
	return len(s.inputs) > 0
}

// countIn makes s count its input in items when it takes batches, with
// inLen the length of one input item, or the producer's own measure of
// what it gives when it has one of the type (a batch of batches counts
// the inner batches' items).
func countIn[In any](s *spec, inLen func(In) int) bool {
	if inLen == nil || !s.takesBatches() {
		return false
	}
	if f, ok := s.inputs[0].producer.outSize.(func(In) int); ok {
		inLen = f
	}
	s.inSize = inLen
	s.itemSize = func(v any) int64 {
		if t, ok := v.(In); ok {
			return int64(inLen(t))
		}
		return 1
	}
	return true
}

// countOut makes s count its output in items, with outLen the length of
// one output item, and marks its output as carrying batches.
func countOut[Out any](s *spec, outLen func(Out) int) {
	if outLen == nil {
		return
	}
	s.givesBatches = true
	s.outSize = outLen
}

// passBatches sets up the counts of a node that hands on one item per item
// it takes: in items when it takes batches, and its output then carries
// batches too when it is a slice.
func passBatches[In, Out any](s *spec) {
	if countIn(s, sliceLen[In]()) {
		if f, ok := s.inSize.(func(Out) int); ok {
			countOut(s, f) // the same type: measured as it came in
		} else {
			countOut(s, sliceLen[Out]())
		}
	}
}

// takeBatches sets up the counts of a node whose output never carries
// batches: a sink, FlatMap, Unbatch, Aggregate.
func takeBatches[In any](s *spec) { countIn(s, sliceLen[In]()) }

// items returns how many items v counts for in s's failure and filter
// counts: the items of a batch when s takes batches, else 1.
func (s *spec) items(v any) int64 {
	if s.itemSize == nil {
		return 1
	}
	return s.itemSize(v)
}

// count returns how many items v counts for: size(v), or 1 when size is
// nil.
func count[T any](size func(T) int, v T) int64 {
	if size == nil {
		return 1
	}
	return int64(size(v))
}

// sizeOf returns the length function f, stored as any, as a func(T) int;
// nil when there is none.
func sizeOf[T any](f any) func(T) int {
	size, _ := f.(func(T) int)
	return size
}
