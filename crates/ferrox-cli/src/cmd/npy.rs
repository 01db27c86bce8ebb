//! NumPy `.npy` files (format 1.0, little-endian, C order) for the commands that hand arrays
//! to other tools (`logits`, `spec-data`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// An `.npy` file whose header (dtype `descr`, `shape`) is written first and whose data is
/// appended piece by piece; [`finish`](Writer::finish) checks that the shape was filled.
pub struct Writer {
    out: BufWriter<File>,
    left: usize,
}

impl Writer {
    pub fn create(path: &Path, descr: &str, shape: &[usize]) -> std::io::Result<Writer> {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        let shape_str = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.join(", ")),
        };
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_str}, }}");
        // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
        let pad = (64 - (10 + header.len() + 1) % 64) % 64;
        header.push_str(&" ".repeat(pad));
        header.push('\n');
        let mut out = BufWriter::new(File::create(path)?);
        out.write_all(b"\x93NUMPY\x01\x00")?;
        out.write_all(&(header.len() as u16).to_le_bytes())?;
        out.write_all(header.as_bytes())?;
        Ok(Writer {
            out,
            left: shape.iter().product(),
        })
    }

    fn take(&mut self, n: usize) -> std::io::Result<()> {
        self.left = self.left.checked_sub(n).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "more values than the shape holds",
            )
        })?;
        Ok(())
    }

    pub fn write_f32(&mut self, data: &[f32]) -> std::io::Result<()> {
        self.take(data.len())?;
        data.iter()
            .try_for_each(|v| self.out.write_all(&v.to_le_bytes()))
    }

    /// `data` rounded to float16 (file dtype `<f2`).
    pub fn write_f16(&mut self, data: &[f32]) -> std::io::Result<()> {
        self.take(data.len())?;
        data.iter()
            .try_for_each(|&v| self.out.write_all(&half::f16::from_f32(v).to_le_bytes()))
    }

    pub fn write_u32(&mut self, data: &[u32]) -> std::io::Result<()> {
        self.take(data.len())?;
        data.iter()
            .try_for_each(|v| self.out.write_all(&v.to_le_bytes()))
    }

    pub fn finish(mut self) -> std::io::Result<()> {
        if self.left != 0 {
            let msg = format!("{} values short of the shape", self.left);
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, msg));
        }
        self.out.flush()
    }
}

/// A whole float32 array.
pub fn write_f32(path: &Path, shape: &[usize], data: &[f32]) -> std::io::Result<()> {
    let mut w = Writer::create(path, "<f4", shape)?;
    w.write_f32(data)?;
    w.finish()
}

/// A whole uint32 array.
pub fn write_u32(path: &Path, shape: &[usize], data: &[u32]) -> std::io::Result<()> {
    let mut w = Writer::create(path, "<u4", shape)?;
    w.write_u32(data)?;
    w.finish()
}
