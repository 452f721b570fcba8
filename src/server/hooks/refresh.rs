//! The refresh hook (not yet).
