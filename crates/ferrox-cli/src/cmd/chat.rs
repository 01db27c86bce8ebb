//! `ferrox chat`: interactive multi-turn chat through the model's template. The KV cache
//! carries over between turns: each turn only evaluates the tokens the template added.
//! Speculative decoding is on unless `--no-spec`.

use super::engine;
use super::run::{report, GenFlags};
use ferrox_models::generate::Session;
use ferrox_tokenizer::template::{prompt_text, Message};
use std::io::{BufRead, Write};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: super::engine::ModelFlags,
    /// System prompt.
    #[arg(long)]
    pub system: Option<String>,
    #[command(flatten)]
    pub gen: GenFlags,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    engine::set_threads(args.gen.threads);
    let eng = args.model.load(args.gen.verbose, &Default::default())?;
    let tok = eng.tokenizer()?;
    let draft = args.gen.draft(&eng)?;
    let mut session = Session::new(&eng.decoder, tok, args.gen.ctx);
    // The drafter indexes the whole conversation: later turns draft from earlier ones.
    session.set_speculation(args.gen.speculation(draft.as_ref()));
    let mut sampler = args.gen.sampler();
    let params = args.gen.params();
    let mut messages: Vec<Message> = args.system.iter().map(Message::system).collect();
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    eprintln!("(empty line or Ctrl-D to quit)");
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        messages.push(Message::user(line.trim_end().to_string()));
        let chat = match prompt_text(tok, &messages, true) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                messages.pop();
                continue;
            }
        };
        let ids = tok.encode_prompt(&chat.text, &chat.literal);
        if ids.len() >= session.ctx_size() {
            eprintln!("context full ({} tokens); start a new chat", ids.len());
            break;
        }
        let out = session.generate(&ids, &params, &mut sampler, |t| {
            let mut o = stdout.lock();
            o.write_all(t.as_bytes()).is_ok() && o.flush().is_ok()
        });
        if writeln!(stdout.lock()).is_err() {
            break;
        }
        if args.gen.verbose {
            report(&out);
        }
        if let Some(e) = out.error {
            // The turn failed: it is not part of the conversation.
            eprintln!("error: {e}");
            messages.pop();
            continue;
        }
        messages.push(Message::assistant(out.text));
    }
    Ok(())
}
