"""The TRL side of the GRPO peer benchmark (bench/peer.bench.ts): Hugging Face TRL's GRPOTrainer on the
checkpoint sinkflex wrote, on sinkflex's own env served over the remote env protocol (`sinkflex envs serve`
on 127.0.0.1), for a fixed plan of GRPO steps; held-out success before and after on the plan's tasks. With
the plan's saveEvery N it saves the policy every N steps (`savedDirs`) for sinkflex's evaluator to score.
The learning rate follows sinkflex's schedule (src/rl/lr-schedule.ts: linear warm-up from lr / warmupSteps,
then constant or cosine to minLrRatio x lr at the last step) as a LambdaLR: transformers' own warm-up
starts at 0 on the first step, one step behind sinkflex's.

Usage: python3 trl_grpo.py PLAN.json OUT.json   (the plan is written by bench/peer.bench.ts)

The checkpoint has a trimmed vocabulary (`sinkflex-vocab.json`): the model's ids are small ids, each the
index of a full Qwen3 tokenizer id. `TrimmedCodec` encodes text with the full tokenizer, then maps each id to
its small id, spelling an id outside the set with the longest kept pieces of its text, as sinkflex does
(src/model/vocab.ts), so both sides feed the model the same ids. The multi-turn loop (`EpisodeRunner`) is
TRL's `rollout_func`: it renders the conversation with the checkpoint's chat template, samples each turn
with transformers' `generate` (whole context re-read every turn, as TRL's own tool loop does), parses
`<tool_call>` blocks, and steps the remote env; TRL then runs its GRPO update on the returned ids, with
the env's tokens masked out (`env_mask`). It is not a reimplementation of TRL's loss: the update is TRL's.

Without trl (or torch, transformers, datasets) it writes {"unavailable": reason} and exits 0.
"""
import json
import os
import re
import resource
import sys
import time
import urllib.error
import urllib.request


def main() -> None:
    plan_path, out_path = sys.argv[1], sys.argv[2]
    plan = json.load(open(plan_path))
    threads = int(plan["threads"])
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    try:
        import torch
        import transformers
        import datasets
        import trl
        from trl import GRPOConfig, GRPOTrainer
    except Exception as err:  # a missing peer is reported, never a failure of the benchmark
        json.dump({"unavailable": f"{type(err).__name__}: {err}"}, open(out_path, "w"))
        return
    torch.set_num_threads(threads)
    torch.manual_seed(plan["seed"])
    t_load = time.perf_counter()
    ckpt = plan["checkpoint"]
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager")
    codec = TrimmedCodec(ckpt)
    template = ChatTemplate(ckpt)
    env = RemoteEnv(plan["envUrl"], plan["envOptions"])
    eval_env = RemoteEnv(plan["envUrl"], plan.get("evalEnvOptions") or plan["envOptions"])
    hp = plan["hparams"]
    runner = EpisodeRunner(model, codec, template, env, hp, torch)
    evaluator = EpisodeRunner(model, codec, template, eval_env, hp, torch)
    load_s = time.perf_counter() - t_load

    out = {
        "versions": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__, "datasets": datasets.__version__, "python": sys.version.split()[0]},
        "threads": torch.get_num_threads(),
        "loadS": load_s,
        "tokenCheck": token_check(plan.get("tokenCheck", []), codec, template, env),
    }

    # Held-out success before RL with this loop: greedy or sampled as the plan says, on the first of sinkflex's
    # held-out tasks and seeds (sinkflex's evaluator scores the final weights on all of them: `finalDir`).
    out["evalBefore"] = evaluator.evaluate(plan["evalTasks"], plan["evalTemperature"])

    # The plan's tasks in order: step s trains on steps[s] (batchTasks tasks, each repeated groupSize times).
    rows = [{"prompt": [{"role": "user", "content": f"task {t['taskIndex']}"}], "taskIndex": t["taskIndex"], "seed": t["seed"]} for step in plan["steps"] for t in step]
    dataset = datasets.Dataset.from_list(rows)
    G, B = hp["groupSize"], hp["batchTasks"]
    timing = StepTiming()
    steps_done = []

    def rollout_func(prompts, trainer):
        t0 = time.perf_counter()
        batch = trainer._current_rollout_rows  # set by the sampler hook below
        res = runner.rollout(batch)
        timing.rollout_s.append(time.perf_counter() - t0)
        timing.rollout_tokens.append(res.pop("computedTokens"))
        return res

    def env_reward(prompts=None, completions=None, env_reward=None, **kwargs):
        return [float(r) for r in env_reward]

    args = GRPOConfig(
        output_dir=plan["workDir"],
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=plan["seed"],
        data_seed=plan["seed"],
        max_steps=len(plan["steps"]),
        per_device_train_batch_size=B * G,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=G,
        num_iterations=hp["epochs"],
        learning_rate=hp["lr"],
        lr_scheduler_type="constant",  # replaced by sinkflex's schedule below (create_scheduler)
        warmup_steps=0,
        weight_decay=hp["weightDecay"],
        max_grad_norm=hp["maxGradNorm"],
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        beta=hp["klCoef"],
        epsilon=hp["clipLow"],
        epsilon_high=hp["clipHigh"],
        loss_type="dapo",
        scale_rewards="group",
        temperature=hp["temperature"],
        top_p=1.0,
        top_k=0,
        max_completion_length=hp["maxTurns"] * (hp["maxTokensPerTurn"] + 1) + 512,
        shuffle_dataset=False,
        mask_truncated_completions=False,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[env_reward], args=args, train_dataset=dataset, processing_class=codec.hf_tokenizer(), rollout_func=rollout_func)
    # rollout_func receives prompts only; the rows (task index, seed) come from the batch TRL is about to generate for.
    original_prepare = trainer._generate_and_score_completions

    def with_rows(inputs):
        trainer._current_rollout_rows = [{"taskIndex": x["taskIndex"], "seed": x["seed"]} for x in inputs]
        return original_prepare(inputs)

    trainer._generate_and_score_completions = with_rows
    total = len(plan["steps"])

    def create_scheduler(num_training_steps, optimizer=None):
        if trainer.lr_scheduler is None:
            # LambdaLR's factor k applies to optimizer step k + 1 (sinkflex's steps are 1-based).
            trainer.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or trainer.optimizer, lambda k: learning_rate_at(k + 1, total, hp) / hp["lr"])
        return trainer.lr_scheduler

    trainer.create_scheduler = create_scheduler
    saved = []
    save_every = int(plan.get("saveEvery") or 0)

    def save_step(step):
        # After the step's timing is taken: saving is not part of a step.
        if save_every > 0 and step % save_every == 0 and step < total:
            saved.append({"step": step, "dir": save_policy(model, ckpt, os.path.join(plan["workDir"], f"step-{step:05d}"))})

    trainer.add_callback(timing.callback(transformers.TrainerCallback, steps_done, save_step))
    # The update's tokens: every sequence's prompt + completion, once per forward pass over it.
    original_loss = trainer.compute_loss

    def counted_loss(model_, inputs, *a, **k):
        n = int(inputs["prompt_mask"].sum().item() + inputs["completion_mask"].sum().item())
        timing.update_tokens_fwd_bwd += n
        return original_loss(model_, inputs, *a, **k)

    trainer.compute_loss = counted_loss
    t_train = time.perf_counter()
    trainer.train()
    out["trainS"] = time.perf_counter() - t_train
    out["steps"] = timing.report(steps_done, hp)
    out["log"] = [h for h in trainer.state.log_history if "loss" in h]
    out["savedDirs"] = saved
    out["evalAfter"] = evaluator.evaluate(plan["evalTasks"], plan["evalTemperature"])
    out["finalDir"] = save_policy(model, ckpt, os.path.join(plan["workDir"], "final"))
    out["peakRssKiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["drifted"] = runner.drifted
    env.close()
    eval_env.close()
    json.dump(out, open(out_path, "w"), indent=1)


def learning_rate_at(step, total, hp):
    """sinkflex's learningRateAt (src/rl/lr-schedule.ts): the learning rate of 1-based step `step` of `total`."""
    import math

    warm = min(hp.get("warmupSteps", 0), total)
    if step <= warm:
        return hp["lr"] * step / warm
    if hp.get("lrSchedule", "constant") == "constant":
        return hp["lr"]
    progress = min(1.0, (step - warm) / max(1, total - warm))
    floor = hp.get("minLrRatio", 0.1)
    return hp["lr"] * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def save_policy(model, ckpt, out_dir):
    """The trained policy as a checkpoint folder sinkflex loads: transformers' weights and config, the
    starting checkpoint's tokenizer, trimmed vocabulary and attention files beside them (so sinkflex's
    evaluator can score TRL's policy on the same held-out tasks)."""
    import shutil

    model.save_pretrained(out_dir, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "sinkflex-vocab.json", "sinkflex_attention.json"):
        if os.path.exists(os.path.join(ckpt, name)):
            shutil.copy(os.path.join(ckpt, name), os.path.join(out_dir, name))
    return out_dir


class StepTiming:
    """Wall time of each trainer step, of its rollout, and the tokens each processed."""

    def __init__(self):
        self.rollout_s = []
        self.rollout_tokens = []
        self.update_tokens_fwd_bwd = 0
        self._t = None

    def callback(self, base, steps_done, after_step):
        timing = self

        class Cb(base):
            def on_step_begin(self, args, state, control, **kw):
                timing._t = time.perf_counter()
                timing._tok = timing.update_tokens_fwd_bwd

            def on_step_end(self, args, state, control, **kw):
                steps_done.append({"stepS": time.perf_counter() - timing._t, "lossTokens": timing.update_tokens_fwd_bwd - timing._tok})
                after_step(state.global_step)

        return Cb()

    def report(self, steps_done, hp):
        out = []
        for i, s in enumerate(steps_done):
            rollout = self.rollout_s[i] if i < len(self.rollout_s) else None
            # Passes over the sequences in the update: the reference model's log-probs (beta > 0), the old
            # policy's (num_iterations > 1), and forward + backward of the loss (counted in compute_loss).
            extra = (1 if hp["klCoef"] > 0 else 0) + (1 if hp["epochs"] > 1 else 0)
            per_pass = s["lossTokens"] // max(1, hp["epochs"])
            out.append({
                "stepS": s["stepS"],
                "rolloutS": rollout,
                "updateS": s["stepS"] - rollout if rollout is not None else None,
                "rolloutTokens": self.rollout_tokens[i] if i < len(self.rollout_tokens) else None,
                "trainTokens": s["lossTokens"] + extra * per_pass,
            })
        return out


class TrimmedCodec:
    """Text <-> the checkpoint's small ids: the full tokenizer, then sinkflex's trimmed-vocabulary mapping."""

    def __init__(self, ckpt):
        from tokenizers import Tokenizer

        self.dir = ckpt
        self.full = Tokenizer.from_file(os.path.join(ckpt, "tokenizer.json"))
        vocab = json.load(open(os.path.join(ckpt, "sinkflex-vocab.json")))
        if vocab.get("format") != "sinkflex-trimmed-vocab-v1":
            raise ValueError(f"{ckpt}/sinkflex-vocab.json is not a sinkflex trimmed vocabulary")
        self.full_ids = vocab["fullIds"]
        self.to_small = {fid: i for i, fid in enumerate(self.full_ids)}
        self.max_piece = max(len(self.full.id_to_token(fid) or "x") for fid in self.full_ids)
        self.spellings = {}
        self.eos = self.to_small[self.full.token_to_id("<|im_end|>")]
        self.pad = self.to_small[self.full.token_to_id("<|endoftext|>")]

    def encode(self, text):
        out = []
        for fid in self.full.encode(text, add_special_tokens=False).ids:
            small = self.to_small.get(fid)
            out.extend([small] if small is not None else self._spell(fid))
        return out

    def _spell(self, fid):
        if fid in self.spellings:
            return self.spellings[fid]
        text = self.full.id_to_token(fid)
        pieces, i = [], 0
        while i < len(text):
            for n in range(min(self.max_piece, len(text) - i), 0, -1):
                tid = self.full.token_to_id(text[i : i + n])
                if tid is not None and tid in self.to_small:
                    pieces.append(self.to_small[tid])
                    i += n
                    break
            else:
                raise ValueError(f"cannot spell token {text!r} with the trimmed vocabulary")
        self.spellings[fid] = pieces
        return pieces

    def decode(self, ids):
        return self.full.decode([self.full_ids[i] for i in ids], skip_special_tokens=False)

    def hf_tokenizer(self):
        """A transformers tokenizer over the small ids, for TRL's padding, decoding and logging only (the
        rollout encodes with `encode`). Its vocabulary is the kept tokens with their small ids."""
        from tokenizers import Tokenizer, models, pre_tokenizers, decoders
        from transformers import PreTrainedTokenizerFast

        vocab = {self.full.id_to_token(fid): i for i, fid in enumerate(self.full_ids)}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=self.full.id_to_token(self.full_ids[self.pad])))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
        hf.padding_side = "left"
        return hf


class ChatTemplate:
    """The checkpoint's chat template (tokenizer_config.json), rendered with jinja2 as transformers does."""

    def __init__(self, ckpt):
        import jinja2

        cfg = json.load(open(os.path.join(ckpt, "tokenizer_config.json")))
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        # @huggingface/jinja's tojson, as sinkflex renders it: Python's layout (", " and ": "), non-ASCII kept.
        env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
        self.template = env.from_string(cfg["chat_template"])

    def render(self, messages, tools, add_generation_prompt=True):
        hf_tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}} for t in tools or []]
        return self.template.render(messages=[hf_message(m) for m in messages], tools=hf_tools or None, add_generation_prompt=add_generation_prompt, bos_token="", eos_token="<|im_end|>", enable_thinking=False)


def hf_message(m):
    """A sinkflex chat message (toolCalls with raw argument text, toolCallId) in Hugging Face's shape."""
    out = {"role": m["role"], "content": m.get("content", "")}
    if m.get("toolCalls"):
        out["tool_calls"] = [{"type": "function", "id": c["id"], "function": {"name": c["name"], "arguments": c["arguments"]}} for c in m["toolCalls"]]
    if m.get("toolCallId"):
        out["tool_call_id"] = m["toolCallId"]
    if m.get("name") and m["role"] == "tool":
        out["name"] = m["name"]
    return out


TOOL_CALL = re.compile(r"<tool_call>\s*([\s\S]*?)\s*</tool_call>")
CANONICAL = re.compile(r'^\s*\{\s*"name"\s*:\s*"(?:[^"\\]|\\.)*"\s*,\s*"arguments"\s*:\s*([\s\S]*?)\s*\}\s*$')


def parse_turn(text, prefix):
    """An assistant turn's text -> content and tool calls (the Qwen `<tool_call>` format, as sinkflex's parser
    reads it: arguments kept as written when the call has the canonical layout)."""
    calls = []
    for i, m in enumerate(TOOL_CALL.finditer(text)):
        inner = m.group(1)
        name, args = "", inner
        try:
            obj = json.loads(inner)
            if isinstance(obj, dict) and isinstance(obj.get("name"), str):
                name = obj["name"]
                exact = CANONICAL.match(inner)
                args = exact.group(1) if exact else json.dumps(obj.get("arguments", {}))
        except ValueError:
            nm = re.search(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"', inner)
            name = nm.group(1) if nm else ""
        calls.append({"id": f"{prefix}{i}", "name": name, "arguments": args})
    content = TOOL_CALL.sub("", text).strip() if calls else text
    return content, calls


class RemoteEnv:
    """Sessions of `sinkflex envs serve` over HTTP (docs/remote-protocol.md)."""

    def __init__(self, url, options):
        self.url = url.rstrip("/")
        self.options = options
        self.free = []

    def _post(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    def session(self):
        return self.free.pop() if self.free else self._post("/sessions", {"options": self.options})["sessionId"]

    def reset(self, sid, task_index, seed):
        return self._post(f"/sessions/{sid}/reset", {"seed": seed, "options": {"taskIndex": task_index}})

    def open_and_reset(self, task_index, seed):
        """A pooled session and its reset; a pooled session the server closed meanwhile (idle) is replaced."""
        sid = self.session()
        try:
            return sid, self.reset(sid, task_index, seed)
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise
            sid = self._post("/sessions", {"options": self.options})["sessionId"]
            return sid, self.reset(sid, task_index, seed)

    def step(self, sid, content, calls):
        return self._post(f"/sessions/{sid}/step", {"action": {"content": content, "toolCalls": calls}})

    def release(self, sid):
        self.free.append(sid)

    def close(self):
        for sid in self.free:
            try:
                urllib.request.urlopen(urllib.request.Request(f"{self.url}/sessions/{sid}", method="DELETE"), timeout=10).read()
            except Exception:
                pass


class EpisodeRunner:
    """Plays episodes turn by turn, every episode of a batch decoding together (left-padded `generate`)."""

    def __init__(self, model, codec, template, env, hp, torch):
        self.model, self.codec, self.template, self.env, self.hp, self.torch = model, codec, template, env, hp, torch
        self.drifted = 0  # training episodes whose sampled text re-rendered differently (sinkflex leaves them out of its update)

    def play(self, tasks, temperature):
        torch = self.torch
        eps = []
        for t in tasks:
            sid, r = self.env.open_and_reset(t["taskIndex"], t["seed"])
            obs = r["observation"]
            text = self.template.render(obs["messages"], obs.get("tools"))
            ids = self.codec.encode(text)
            eps.append({"sid": sid, "messages": list(obs["messages"]), "tools": obs.get("tools"), "text": text, "prompt": ids, "ids": list(ids), "mask": [], "logps": [], "reward": 0.0, "done": False, "drift": False})
        computed = 0
        for turn in range(self.hp["maxTurns"]):
            live = [e for e in eps if not e["done"]]
            if not live:
                break
            width = max(len(e["ids"]) for e in live)
            inp = torch.tensor([[self.codec.pad] * (width - len(e["ids"])) + e["ids"] for e in live])
            att = torch.tensor([[0] * (width - len(e["ids"])) + [1] * len(e["ids"]) for e in live])
            computed += int(att.sum())
            gen = dict(max_new_tokens=self.hp["maxTokensPerTurn"], eos_token_id=self.codec.eos, pad_token_id=self.codec.pad, return_dict_in_generate=True, output_logits=True)
            gen.update(dict(do_sample=True, temperature=temperature, top_p=1.0, top_k=0) if temperature > 0 else dict(do_sample=False))
            training = self.model.training
            self.model.eval()
            with torch.no_grad():
                res = self.model.generate(input_ids=inp, attention_mask=att, **gen)
            self.model.train(training)  # TRL reads the mode (train or eval) to label and size its batch
            new = res.sequences[:, width:]
            logits = torch.stack(res.logits, dim=1).float()
            lp = torch.log_softmax(logits / (temperature if temperature > 0 else 1.0), dim=-1)
            for b, e in enumerate(live):
                toks = new[b].tolist()
                if self.codec.eos in toks:
                    toks = toks[: toks.index(self.codec.eos) + 1]
                else:
                    toks = [x for x in toks if x != self.codec.pad] if self.codec.pad != self.codec.eos else toks
                computed += len(toks)
                e["ids"] += toks
                e["mask"] += [1] * len(toks)
                e["logps"] += [float(lp[b, i, x]) for i, x in enumerate(toks)]
                ended = toks and toks[-1] == self.codec.eos
                body = toks[:-1] if ended else toks
                text = self.codec.decode(body)
                content, calls = parse_turn(text, f"call_{turn}_")
                if not ended:  # closed as the template would: the end-of-turn token given, not sampled
                    e["ids"].append(self.codec.eos)
                    e["mask"].append(0)
                    e["logps"].append(0.0)
                e["text"] += self.codec.decode(body + [self.codec.eos])
                st = self.env.step(e["sid"], content, calls)
                e["reward"] += float(st["reward"])
                if st["done"] or turn + 1 >= self.hp["maxTurns"]:
                    e["done"] = True
                    continue
                assistant = {"role": "assistant", "content": content, **({"toolCalls": calls} if calls else {})}
                e["messages"] += [assistant] + st["observation"]["messages"]
                full = self.template.render(e["messages"], e["tools"])
                if full.startswith(e["text"]):
                    added = full[len(e["text"]):]
                    e["text"] = full
                else:
                    # The sampled text re-renders differently (a malformed call): keep what was sampled and
                    # add the framing of the new messages, as sinkflex's renderer does on drift.
                    e["drift"] = True
                    dummy = [{"role": "user", "content": "d"}, {"role": "assistant", "content": "d"}]
                    before = self.template.render(dummy, None, add_generation_prompt=False)
                    after = self.template.render(dummy + st["observation"]["messages"], None)
                    added = "\n" + after[len(before):]
                    e["text"] += added
                added = self.codec.encode(added)
                e["ids"] += added
                e["mask"] += [0] * len(added)
                e["logps"] += [0.0] * len(added)
        for e in eps:
            self.env.release(e["sid"])
        return eps, computed

    def rollout(self, rows):
        eps, computed = self.play(rows, self.hp["temperature"])
        self.drifted += sum(1 for e in eps if e["drift"])
        return {
            "prompt_ids": [e["prompt"] for e in eps],
            "completion_ids": [e["ids"][len(e["prompt"]):] for e in eps],
            "logprobs": [e["logps"] for e in eps],
            "env_mask": [e["mask"] for e in eps],
            "env_reward": [e["reward"] for e in eps],
            "computedTokens": computed,
        }

    def evaluate(self, tasks, temperature):
        t0 = time.perf_counter()
        eps, computed = self.play(tasks, temperature)
        wins = sum(1 for e in eps if e["reward"] >= 1 - 1e-9)
        return {"successes": wins, "trials": len(eps), "rate": wins / max(1, len(eps)), "tokens": computed, "wallS": time.perf_counter() - t0}


def token_check(samples, codec, template, env):
    """sinkflex's recorded trajectories (messages, token ids) rendered and encoded here: equal ids?"""
    checked, equal, first = 0, 0, None
    tools = {}
    for s in samples:
        msgs = s["messages"]
        if s["taskIndex"] not in tools:  # the task's tool specs, as the env offers them
            sid, r = env.open_and_reset(s["taskIndex"], 0)
            tools[s["taskIndex"]] = r["observation"].get("tools")
            env.release(sid)
        # The recorded ids end with the last sampled turn: render up to and including it.
        text = template.render(msgs, tools[s["taskIndex"]], add_generation_prompt=False)
        ids = codec.encode(text)
        want = s["tokens"]
        n = min(len(want), len(ids))
        checked += 1
        if ids[:n] == want[:n] and n > 0:
            equal += 1
        elif first is None:
            k = next((i for i in range(n) if ids[i] != want[i]), n)
            first = {"at": k, "ours": codec.decode(ids[max(0, k - 5) : k + 5]), "sinkflex": codec.decode(want[max(0, k - 5) : k + 5])}
    return {"checked": checked, "equal": equal, "firstDifference": first}


if __name__ == "__main__":
    main()
