// Package checkpoint keeps the positions a pipeline's sources have
// settled up to, so that a run after a crash or a redeploy resumes where
// the last one stopped (pipeline.WithCheckpoint).
//
// Three stores come with Sluice: [OpenFile], one file on the local disk
// (the embedded default, for a pipeline that runs on one machine);
// [NewMemory], in the memory of the process (for tests and examples); and
// the checkpoint/sqlstore module, a table in SQLite or PostgreSQL. All of
// them pass the conformance suite of package checkpoint/checkpointtest,
// and so should a store of your own.
package checkpoint

import "context"

// A Store keeps one position per pipeline and source name. Save replaces
// the position kept for the pair; Load returns it, or nil when none was
// saved. A position is opaque bytes that the source gave (node.Emitter's
// EmitAt), or, where an event-time Aggregate keeps a window log, an
// envelope of the pipeline's around them (see pipeline.WithCheckpoint);
// a store keeps them as given, byte for byte: an empty position
// (nil or not) loads as an empty, non-nil slice, so that nil from Load
// always means "none saved". The store keeps a copy: the caller may change
// the slice it passed to Save, or the one Load returned, afterwards.
//
// Pairs are independent: the same source name in two pipelines is two
// positions. Names are UTF-8 text; a store may refuse a name that is not
// UTF-8 or holds a NUL byte, or a pair longer than it can key (sqlstore on
// PostgreSQL: about 2 600 bytes together that do not compress), with an
// error, but never keeps it changed.
//
// Implementations must be safe for concurrent use. Once Save returned nil,
// the position survives a crash of the process. A Save that returned an
// error may or may not have replaced the position (the write may have
// landed before the error), except when the context was done before the
// call: then it changes nothing. A Load or Save whose context is done
// returns the context's error.
type Store interface {
	Load(ctx context.Context, pipeline, source string) ([]byte, error)
	Save(ctx context.Context, pipeline, source string, pos []byte) error
}
