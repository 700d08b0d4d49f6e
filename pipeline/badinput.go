package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// refuseItem sends item, with tracker tr, which node nr cannot take for
// cause (see [unequalKeyError], [timeRangeError]), to the node's failure
// action at now. An error of the action (Fail) is not restartable: the
// item is taken, and a restart would not see it again.
func refuseItem(ctx context.Context, nr *nodeRun, now time.Time, item any, tr *tracker, cause error) error {
	fl := &failure{err: cause, first: now, last: now}
	if err := nr.itemFailed(ctx, item, tr, fl); err != nil {
		if errors.Is(err, cause) {
			return &notRestartable{err}
		}
		return err
	}
	return nil
}

// An unequalKeyError is the failure of an item whose key is not equal to
// itself (a NaN, or a struct, array or interface holding one): a map
// never finds such a key again, so it names no window of an Aggregate and
// joins nothing in a Join. Keyed takes such keys, as one lane.
type unequalKeyError struct {
	node, side string
	key        any
}

func (e *unequalKeyError) Error() string {
	return fmt.Sprintf("pipeline: %s: the %sitem's key %v (%T) is not equal to itself (a NaN, or a value holding one), so it names no group",
		e.node, e.side, e.key, e.key)
}

// selfUnequal reports whether k is not equal to itself (a NaN, or a
// value holding one); false for a key whose dynamic type cannot be
// compared, which panics where it is used as a map key, as before.
func selfUnequal[K comparable](k K) (unequal bool) {
	defer func() { _ = recover() }()
	return k != k
}
