//! History's edge.

pub mod recall;
pub mod relay;
pub mod resume;
