//! A file the user named, read whole when the options are made.

use serde::{Deserialize, Serialize};

/// The text of a file the user named (a targets file, a stage file, a CA bundle), read when
/// the options are made so that they travel whole; its name is kept for messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "FileTextWire", into = "FileTextWire")]
pub struct FileText {
    /// The path as the user gave it.
    pub name: String,
    pub text: String,
}

/// On the wire `{file, text}`; in a sweep file a path, read when the file is read.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum FileTextWire {
    Whole { file: String, text: String },
    Path(String),
}

impl From<FileText> for FileTextWire {
    fn from(f: FileText) -> Self {
        FileTextWire::Whole { file: f.name, text: f.text }
    }
}

impl TryFrom<FileTextWire> for FileText {
    type Error = String;
    fn try_from(w: FileTextWire) -> Result<Self, String> {
        match w {
            FileTextWire::Whole { file, text } => Ok(FileText { name: file, text }),
            // A sweep file's path: read when the sweep file is read.
            FileTextWire::Path(p) => FileText::from_arg(&p),
        }
    }
}

impl FileText {
    /// Reads the file at `path`.
    pub fn from_arg(path: &str) -> Result<FileText, String> {
        std::fs::read_to_string(path)
            .map(|text| FileText { name: path.to_string(), text })
            .map_err(|e| format!("cannot read {path}: {e}"))
    }
}
