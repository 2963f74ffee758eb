//! Stream schedules (placeholder).
