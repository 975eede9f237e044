"""Pure operations (custom autograd where needed). No registry, no measurement."""
