//! The file source (placeholder).

/// Placeholder until the file source lands.
pub fn start(
    _loops: &crate::loops::Loops,
    _path: std::path::PathBuf,
    _node_name: String,
    _period: std::time::Duration,
    _updates: crossbeam_channel::Sender<super::SourceUpdate>,
) -> Result<(), crate::loops::SpawnError> {
    Ok(())
}
