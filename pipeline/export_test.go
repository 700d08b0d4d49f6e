package pipeline

// SetParkWokeHook has f run each time a parked item's timer fired and the
// item joined the woken ones; nil removes it. Only a test that is not
// parallel sets it: it sees the wakes of every run of the process.
func SetParkWokeHook(f func()) {
	if f == nil {
		parkWokeHook.Store(nil)
		return
	}
	parkWokeHook.Store(&f)
}
