//! Ingest: media files into stored titles (being built).
