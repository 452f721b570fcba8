//! Access control's edge: what `auth` needs from the network — the
//! identity provider's key set (`jwks`: fetched, cached and refreshed on
//! the worker's runtime, never blocking it).

pub mod jwks;
