//! corecast's own protocol.

pub mod control;
