//! Loading stored titles into the core (being built).
