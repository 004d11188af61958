//! `fvpoisson bench --multi-gpu` (placeholder, filled below).
