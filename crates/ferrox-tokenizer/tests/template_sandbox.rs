//! The chat-template sandbox (src/sandbox.rs) through the public template API: hostile
//! templates fail quickly with an error saying why; guarded builtins still work.

use ferrox_tokenizer::template::{ChatTemplate, Message};
use std::time::{Duration, Instant};

fn render(src: &str) -> Result<String, String> {
    let t = ChatTemplate::new(src, "<s>", "</s>").map_err(|e| e.to_string())?;
    t.render(&[Message::user("hi")], true)
        .map_err(|e| format!("{e:#}"))
}

/// Each hostile template fails, quickly, with an error saying why.
#[test]
fn hostile_templates_are_refused_quickly() {
    let cases = [
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
            // On a loaded machine the time budget may run out before the fuel does.
            "fuel|time budget",
        ),
        ("{{ {'a': [1, 2]} | tojson(indent=2**40) }}", "tojson indent"),
        ("{{ 'x\ny' | indent(2**40) }}", "indent width"),
        ("{{ 'x\ny' | indent(width=2**40) }}", "indent width"),
        ("{{ ([1] * 2**40) | list | length }}", "more than 100000 items"),
        ("{{ ([1, 2] * 2**62) | sort | first }}", "more than 100000 items"),
        ("{{ ([1] * 2**40) | join(',') }}", "items"),
        ("{{ ([1] * 2**40) | tojson }}", "items"),
        ("{{ ([1] * 2**40) | string }}", "items"),
        ("{{ [[1] * 2**40] | string }}", "items"),
        ("{{ [[1] * 2**40, [1] * 2**40] | sort | length }}", "items"),
        ("{{ [[1] * 2**40] | tojson }}", "items"),
        ("{{ (['x' * 10000000] * 10) | join }}", "text longer"),
        ("{{ range(2**40) | length }}", "range"),
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion"),
        ("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}", "rendered prompt is longer"),
        ("{{ ('a' * 100000).replace('', 'b' * 1000) }}", "replace"),
        ("{{ ('a' * 100000) | replace('a', 'b' * 1000) }}", "replace"),
        ("{{ '%999999999s' | format('x') }}", "format width"),
        ("{{ '{:>999999999}'.format('x') }}", "format width"),
        ("{{ ('x' * 1000000).split('x') | length }}", "pieces"),
        ("{{ ', '.join([1] * 2**40) }}", "items"),
    ];
    for (src, why) in cases {
        let t = Instant::now();
        let r = render(src);
        let took = t.elapsed();
        let e = r.expect_err(src);
        assert!(why.split('|').any(|w| e.contains(w)), "{src}: {e}");
        assert!(took < Duration::from_secs(1), "{src}: {took:?}");
    }
}

/// The guarded builtins still do their job on reasonable arguments.
#[test]
fn guarded_builtins_work() {
    let src = "{{ 'a\nb' | indent(2) }}|{{ 'a\nb' | indent(width=1, first=true) }}|\
               {{ [3, 1, 2] | sort | join(',') }}|{{ {'k': [1]} | tojson(indent=1) }}|\
               {{ 'x-y'.replace('-', '+') }}|{{ '%3d' | format(7) }}|{{ '{:>3}'.format(7) }}|\
               {{ 'a b'.split() | length }}|{{ ', '.join(['p', 'q']) }}|{{ range(3) | list }}|\
               {{ range(10, 0, -3) | list }}|{{ range(3) | length }}|\
               {% for i in range(1, 3) %}{{ i }}{{ loop.last }}{% endfor %}";
    assert_eq!(
        render(src).unwrap(),
        "a\n  b| a\n b|1,2,3|{\n \"k\": [\n  1\n ]\n}|x+y|  7|  7|2|p, q|[0, 1, 2]|\
         [10, 7, 4, 1]|3|1False2True"
    );
}
