//! The limits a chat template renders under. A template comes with the model file, so it is
//! input like any other: it may loop for hours, recurse, or ask for terabytes
//! (`tojson(indent=2**40)`). minijinja counts executed instructions against a fuel budget
//! (bounding loops, however nested); a render also has a wall-clock budget ([`TIME_BUDGET`]),
//! checked as output is written, as `range` loops advance and in every guarded builtin; output
//! goes through a writer that stops at [`MAX_OUTPUT`]; macro recursion is bounded; and the
//! builtins whose cost is not one instruction (materializing a sequence, padding, replacing,
//! formatting) refuse arguments beyond these limits before they run.
//!
//! Not covered (minijinja has no hook for them): strings grown by repeated concatenation
//! (`~`, `+`, `{% set %}` blocks) and `*` repetition up to minijinja's own 100 MB cap inside a
//! loop that neither writes nor calls a guarded builtin. Such a template can still take
//! seconds of CPU and gigabytes of memory; the server renders off its async workers under a
//! time budget and refuses new renders while overdue ones run, so it fails its requests, not
//! the server.

use minijinja::value::{Enumerator, Kwargs, Object, ObjectRepr, Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Instructions one render may execute: Qwen's template over 400 messages and 20 tools needs
/// under a twentieth of this (`template_qwen.rs`); minijinja runs tens of millions a second.
pub const FUEL: u64 = 2_000_000;
/// Wall-clock time one render may take (real ones take milliseconds).
pub const TIME_BUDGET: Duration = Duration::from_millis(500);
/// Bytes of rendered text (far beyond any context window).
pub const MAX_OUTPUT: usize = 8 << 20;
/// Items a builtin may materialize or walk in one value (nested items included).
pub const MAX_ITEMS: usize = 100_000;
/// Nested macro calls and includes.
pub const RECURSION_LIMIT: usize = 64;
/// Widest indentation or field width a template may ask for.
pub const MAX_WIDTH: usize = 256;

thread_local! {
    /// When the render running on this thread must stop.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether it ran past that (a `range` loop cut short must fail the render).
    static OVERRUN: Cell<bool> = const { Cell::new(false) };
}

/// The time budget of the render on this thread, from `start` until dropped.
pub struct Clock {
    budget: Duration,
}

impl Clock {
    pub fn start(budget: Duration) -> Clock {
        DEADLINE.set(Some(Instant::now() + budget));
        OVERRUN.set(false);
        Clock { budget }
    }

    /// The error for a render that ran out of time, if this one did.
    pub fn overrun(&self) -> Option<Error> {
        OVERRUN.get().then(|| {
            refuse(format!(
                "the chat template ran past its time budget of {:?}",
                self.budget
            ))
        })
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        DEADLINE.set(None);
    }
}

fn out_of_time() -> bool {
    let late = DEADLINE.get().is_some_and(|d| Instant::now() >= d);
    if late {
        OVERRUN.set(true);
    }
    late
}

fn check_time(what: &str) -> Result<(), Error> {
    match out_of_time() {
        true => Err(refuse(format!("{what}: the chat template ran out of time"))),
        false => Ok(()),
    }
}

fn refuse(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// Refuses a value holding more than [`MAX_ITEMS`] items, nested ones included, or nested
/// deeper than [`RECURSION_LIMIT`]. Counts by walking (at most `MAX_ITEMS + 1` steps): a lazy
/// repetition can report a wrapped-around length, and formatting or comparing a value walks
/// all of it.
pub fn check_items(what: &str, v: &Value) -> Result<(), Error> {
    fn walk(v: &Value, left: &mut usize, depth: usize) -> Result<bool, Error> {
        if !matches!(
            v.kind(),
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable
        ) {
            return Ok(true);
        }
        if depth > RECURSION_LIMIT {
            return Ok(false);
        }
        let map = v.kind() == ValueKind::Map;
        for item in v.try_iter()? {
            *left = match left.checked_sub(1) {
                Some(l) => l,
                None => return Ok(false),
            };
            if left.is_multiple_of(1024) {
                check_time("walking a value")?;
            }
            let inner = if map { v.get_item(&item)? } else { item };
            if !walk(&inner, left, depth + 1)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
    if !walk(v, &mut MAX_ITEMS.clone(), 0)? {
        return Err(refuse(format!(
            "{what}: more than {MAX_ITEMS} items (chat template limit)"
        )));
    }
    Ok(())
}

/// A `fmt::Write` that fails past `left` bytes: measures a value's text without building it.
struct Budget {
    left: usize,
}

impl std::fmt::Write for Budget {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.left = self.left.checked_sub(s.len()).ok_or(std::fmt::Error)?;
        Ok(())
    }
}

/// Refuses a value of too many items or whose text would exceed [`MAX_OUTPUT`] bytes.
fn check_text(what: &str, v: &Value) -> Result<(), Error> {
    use std::fmt::Write;
    check_items(what, v)?;
    let mut b = Budget { left: MAX_OUTPUT };
    if write!(b, "{v}").is_err() {
        return Err(refuse(format!(
            "{what}: text longer than {MAX_OUTPUT} bytes (chat template limit)"
        )));
    }
    Ok(())
}

/// Refuses `tojson` output past [`MAX_OUTPUT`] bytes (checked as it grows).
pub fn check_output(len: usize) -> Result<(), Error> {
    check_len("tojson", len)
}

fn check_len(what: &str, len: usize) -> Result<(), Error> {
    if len > MAX_OUTPUT {
        return Err(refuse(format!(
            "{what}: {len} bytes is over the chat template limit of {MAX_OUTPUT}"
        )));
    }
    Ok(())
}

/// Length of `s` with every `from` replaced by `to` (Python's rule for an empty `from`: `to`
/// around every character), without building it.
fn replaced_len(s: &str, from: &str, to: &str, count: Option<usize>) -> usize {
    let n = match from.is_empty() {
        true => s.chars().count() + 1,
        false => s.matches(from).count(),
    };
    let n = count.map_or(n, |c| c.min(n));
    (s.len() - n * from.len()).saturating_add(n.saturating_mul(to.len()))
}

/// Refuses printf-style (`%10s`) or `str.format` (`{:>10}`) widths and precisions above
/// [`MAX_WIDTH`].
pub fn check_format_spec(spec: &str) -> Result<(), Error> {
    let b = spec.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let in_spec = b[i] == b'%' || b[i] == b':';
        i += 1;
        if !in_spec {
            continue;
        }
        // Flags, fill and alignment, then digit runs up to the conversion.
        while i < b.len() && !b[i].is_ascii_alphabetic() && b[i] != b'}' {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i > start {
                let n: usize = spec[start..i].parse().unwrap_or(usize::MAX);
                if n > MAX_WIDTH {
                    return Err(refuse(format!(
                        "format width {n} is over the chat template limit of {MAX_WIDTH}"
                    )));
                }
            } else {
                i += 1;
            }
        }
    }
    Ok(())
}

/// The builtins that materialize their input: refused beyond [`MAX_ITEMS`] items.
macro_rules! item_filters {
    ($($name:ident),* $(,)?) => {
        [$((stringify!($name), Value::from_function(minijinja::filters::$name))),*]
    };
}

/// Limits `env`: fuel, recursion, and the guarded builtins and Python methods.
pub fn install(env: &mut Environment<'static>) {
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(RECURSION_LIMIT);
    env.add_function("range", range);
    let by_items = item_filters![
        list, sort, unique, reverse, sum, min, max, batch, slice, map, select, reject, selectattr,
        rejectattr, groupby, dictsort, items, last, chain, zip, lines,
    ];
    for (name, raw) in by_items {
        env.add_filter(name, move |state: &State, args: Rest<Value>| {
            check_time(name)?;
            if let Some(v) = args.first() {
                check_items(name, v)?;
            }
            raw.call(state, &args)
        });
    }
    for (name, raw) in item_filters![string, pprint] {
        env.add_filter(name, move |state: &State, args: Rest<Value>| {
            if let Some(v) = args.first() {
                check_text(name, v)?;
            }
            raw.call(state, &args)
        });
    }
    let join = Value::from_function(minijinja::filters::join);
    env.add_filter("join", move |state: &State, args: Rest<Value>| {
        if let Some(v) = args.first() {
            check_join(v, args.get(1).and_then(Value::as_str).unwrap_or(""))?;
        }
        join.call(state, &args)
    });
    let replace = Value::from_function(minijinja::filters::replace);
    env.add_filter("replace", move |state: &State, args: Rest<Value>| {
        if let (Some(s), Some(from), Some(to)) = (
            args.first().and_then(Value::as_str),
            args.get(1).and_then(Value::as_str),
            args.get(2).and_then(Value::as_str),
        ) {
            let count = args.get(3).and_then(Value::as_usize);
            check_len("replace", replaced_len(s, from, to, count))?;
        }
        replace.call(state, &args)
    });
    let indent = Value::from_function(minijinja::filters::indent);
    env.add_filter("indent", move |state: &State, args: Rest<Value>| {
        check_indent_args(&args)?;
        indent.call(state, &args)
    });
    let format = Value::from_function(minijinja::filters::format);
    env.add_filter("format", move |state: &State, args: Rest<Value>| {
        if let Some(spec) = args.first().and_then(Value::as_str) {
            check_format_spec(spec)?;
        }
        format.call(state, &args)
    });
    env.set_unknown_method_callback(method);
}

/// `join`: at most [`MAX_ITEMS`] items whose text, with the separators, fits [`MAX_OUTPUT`].
fn check_join(v: &Value, sep: &str) -> Result<(), Error> {
    check_text("join", v)?;
    let n = v.try_iter().map_or(0, |i| i.count());
    check_len("join", n.saturating_mul(sep.len()))
}

/// `indent`'s width (positional or `width=`) bounded, and the indented text too (the builtin
/// repeats a space `width` times per line).
fn check_indent_args(args: &[Value]) -> Result<(), Error> {
    let mut width = 4;
    for (i, a) in args.iter().enumerate().skip(1) {
        let w = match a.kind() {
            ValueKind::Number if i == 1 => a.clone(),
            ValueKind::Map => a.get_attr("width")?,
            _ => continue,
        };
        if w.is_undefined() {
            continue;
        }
        width = w
            .as_usize()
            .ok_or_else(|| refuse("indent: width must be a non-negative integer"))?;
    }
    if width > MAX_WIDTH {
        return Err(refuse(format!(
            "indent width {width} is over the chat template limit of {MAX_WIDTH}"
        )));
    }
    let text = args.first().and_then(Value::as_str).unwrap_or("");
    check_len(
        "indent",
        text.len() + text.lines().count().saturating_mul(width),
    )
}

/// Python string methods (minijinja-contrib's pycompat) with their costly arguments checked.
fn method(state: &State, value: &Value, name: &str, args: &[Value]) -> Result<Value, Error> {
    check_time(name)?;
    if let Some(s) = value.as_str() {
        let arg = |i: usize| args.get(i).and_then(Value::as_str);
        match name {
            "replace" => {
                if let (Some(from), Some(to)) = (arg(0), arg(1)) {
                    let count = args.get(2).and_then(Value::as_usize);
                    check_len("replace", replaced_len(s, from, to, count))?;
                }
            }
            "join" => check_join(args.first().unwrap_or(&Value::UNDEFINED), s)?,
            "format" => check_format_spec(s)?,
            "split" | "rsplit" => {
                let pieces = match arg(0) {
                    Some(sep) if !sep.is_empty() => s.matches(sep).count(),
                    _ => s.split_whitespace().count(),
                };
                if pieces > MAX_ITEMS {
                    return Err(refuse(format!("{name}: more than {MAX_ITEMS} pieces")));
                }
            }
            "splitlines" if s.lines().take(MAX_ITEMS + 1).count() > MAX_ITEMS => {
                return Err(refuse(format!("{name}: more than {MAX_ITEMS} lines")));
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, name, args)
}

/// The text of a render, stopping at [`MAX_OUTPUT`] bytes or when the render runs out of
/// time (minijinja reports a failed write without its reason: [`error`](Self::error) has it).
#[derive(Default)]
pub struct CappedOutput {
    pub text: Vec<u8>,
    full: bool,
}

impl CappedOutput {
    /// Why writing stopped, if it did for its size (time: [`Clock::overrun`]).
    pub fn error(&self) -> Option<Error> {
        self.full.then(|| {
            refuse(format!(
                "the rendered prompt is longer than the chat template limit of {MAX_OUTPUT} bytes"
            ))
        })
    }
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if out_of_time() {
            return Err(std::io::Error::other("out of time"));
        }
        if self.text.len() + buf.len() > MAX_OUTPUT {
            self.full = true;
            return Err(std::io::Error::other("output limit"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Checks a `tojson` indent.
pub fn check_indent(indent: usize) -> Result<(), Error> {
    if indent > MAX_WIDTH {
        return Err(refuse(format!(
            "tojson indent {indent} is over the chat template limit of {MAX_WIDTH}"
        )));
    }
    Ok(())
}

/// A `Kwargs` reader for `tojson` that bounds the indent.
pub fn tojson_indent(kwargs: &Kwargs) -> Result<Option<usize>, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    if let Some(n) = indent {
        check_indent(n)?;
    }
    Ok(indent)
}

/// Python's `range` (as minijinja's, at most [`MAX_ITEMS`] items), cut short when the render
/// runs out of time (the render then fails: see [`Clock::overrun`]).
fn range(lower: i64, upper: Option<i64>, step: Option<i64>) -> Result<Value, Error> {
    let (start, stop) = match upper {
        Some(u) => (lower, u),
        None => (0, lower),
    };
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(refuse("range: step is 0"));
    }
    let (span, by) = (i128::from(stop) - i128::from(start), i128::from(step));
    let len = if (span > 0) == (by > 0) && span != 0 {
        (span.abs() + by.abs() - 1) / by.abs()
    } else {
        0
    };
    if len > MAX_ITEMS as i128 {
        return Err(refuse(format!("range: more than {MAX_ITEMS} items")));
    }
    Ok(Value::from_object(TimedRange {
        start,
        step,
        len: len as usize,
    }))
}

/// Exact about its length (loops read `loop.last` from it) unless the clock cuts it short.
struct RangeIter {
    next: i64,
    step: i64,
    left: usize,
}

impl Iterator for RangeIter {
    type Item = Value;
    fn next(&mut self) -> Option<Value> {
        if self.left == 0 || out_of_time() {
            return None;
        }
        let v = self.next;
        self.left -= 1;
        self.next = self.next.wrapping_add(self.step);
        Some(Value::from(v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for RangeIter {}

#[derive(Debug)]
struct TimedRange {
    start: i64,
    step: i64,
    len: usize,
}

impl Object for TimedRange {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Iter(Box::new(RangeIter {
            next: self.start,
            step: self.step,
            left: self.len,
        }))
    }
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.len)
    }
}
