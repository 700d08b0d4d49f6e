// Package checkpoint keeps the positions a pipeline's sources have
// settled up to, so that a run after a crash or a redeploy resumes where
// the last one stopped (pipeline.WithCheckpoint).
package checkpoint

import "context"

// A Store keeps one position per pipeline and source name. Save replaces
// the position kept for the pair; Load returns it, or nil when none was
// saved. A position is opaque bytes that the source gave (node.Emitter's
// EmitAt); a store keeps them as given. Implementations must be safe for
// concurrent use; once Save returned nil, the position survives a crash of
// the process.
type Store interface {
	Load(ctx context.Context, pipeline, source string) ([]byte, error)
	Save(ctx context.Context, pipeline, source string, pos []byte) error
}
