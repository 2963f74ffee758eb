//! Stride allocation, variable-grain striping and replica placement (placeholder).
