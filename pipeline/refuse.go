package pipeline

// Refuse makes Build fail with err, as a [*BuildError] naming the node,
// joined with every other problem Build finds. It is for a function that
// adds a node on the user's behalf, such as a connector's sink, and
// checks settings of its own that the pipeline does not know: it adds its
// node whatever they are, with Refuse(err) among the node's options when
// they cannot work, rather than panicking before Build can say which
// node and what. A nil err refuses nothing, nor does a nil pointer of an
// error type held in err; several Refuse options give
// one problem each.
func Refuse(err error) NodeOption {
	return func(c *nodeConfig) {
		if !isNil(err) {
			c.refused = append(c.refused, err)
		}
	}
}

// checkRefused returns the problems node n was refused for (see
// [Refuse]).
func checkRefused(n *spec) []error { return n.cfg.refused }
