// Package hook carries the calls between the module's own packages that
// are plumbing, not API: a package sets a hook in its init, another calls
// it. It imports only the standard library, so that any package of the
// module (resilience, which imports no other package users see, too) can
// set one.
package hook

import "sync/atomic"

// TrackBudget, set by package resilience, makes budget, a
// *resilience.Budget, count what firsts counts as first attempts, from its
// value now, until untrack is called. Package pipeline tracks each node's
// count of calls while the node runs.
var TrackBudget func(budget any, firsts *atomic.Int64) (untrack func())
