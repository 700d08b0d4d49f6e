// Package same compares values whose dynamic types may not be
// comparable, such as the observer.StatsReader an observer is handed.
package same

// Is reports whether a == b; false, not a panic, when their dynamic type
// cannot be compared (a struct holding a slice, a map or a func, given
// by value).
func Is[T comparable](a, b T) (eq bool) {
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	return a == b
}
