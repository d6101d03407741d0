"""The per-worker training loop run by Ray Train: DDP over every planned GPU (or its CPU stand-in),
honest step timing, exactly-once epochs with uneven shards, resumable at any world size.

Each optimizer step is timed in two parts: waiting for the next batch(es) from Ray Data, and
computing (forward, backward, optimizer; synchronised on GPU so the clock sees the work). Their
ratio is what says whether the GPU starves. Images arrive as uint8 CHW and are normalised here,
on the worker's device.

Every rank draws from its own shard of each epoch, split without dropping rows to make the
shards equal, so the shards end at different steps; `trainers.control` makes the ranks decide
together, before each step, whether it is a normal DDP step, a drain step (some ranks are out of
data) or the end of the epoch, and whether to stop. The final partial batch of each shard is
counted (sample accounting) but not trained on. Where training resumes, and how a resumed epoch
skips what it had already drawn, is `trainers.resume`.
"""

from __future__ import annotations

import time


def train_loop(spec) -> dict:
    """One rank's training. An error no restart mends (bad data, a weights file that does not fit,
    a bug in the user's loss or in ours) is posted to the launcher, which ends the job, before it
    is raised: Ray Train would restart the group `max_failures` times, and every restart meets the
    same error (`trainers.failures`). What a restart mends (a lost peer, a drained node) is raised
    at once, for Ray Train."""
    import ray.train

    from smlaunch.trainers.failures import describe, end_job_for

    phase_marks = {"train_workers_up": time.time()}  # the run's phases (`launcher.report.phases`): wall clock
    run = None
    try:
        run = _Run(spec, phase_marks)
        return run.train()
    except Exception as exc:  # also a data task's error, which reaches the rank wrapped by Ray
        if run is not None:
            run.console.flush(wait=True)  # the steps before the error reach the console first
        rank, doing = ray.train.get_context().get_world_rank(), run.doing if run else "while starting"
        end_job_for(exc, rank, lambda error: describe(error, rank, doing, spec.user_functions()))
        raise


class _Run:
    def __init__(self, spec, phase_marks: dict):
        import ray.train
        import ray.train.torch
        import torch

        from smlaunch.cluster.run_relay import EventSender
        from smlaunch.config.precision import choose_precision
        from smlaunch.pipelines.sources.host_loss import LostHostGuard
        from smlaunch.series import StepLog
        from smlaunch.trainers.accounting import Accountant
        from smlaunch.trainers.cache_epochs import CacheEpochs
        from smlaunch.trainers.callbacks import Callbacks, RunView
        from smlaunch.trainers.checkpoints import CheckpointLog
        from smlaunch.trainers.control import Control
        from smlaunch.trainers.epoch_progress import EpochProgress
        from smlaunch.trainers.mixing import LabelMix
        from smlaunch.trainers.model import build_model
        from smlaunch.trainers.next_epoch import NextEpoch
        from smlaunch.trainers.recipe import CompiledForward, Recipe, run_capability
        from smlaunch.trainers.resume import initial_state
        from smlaunch.trainers.run_callbacks import ConsoleLog, PhaseMarks, StepCheckpoints
        from smlaunch.trainers.task import make_task
        from smlaunch.trainers.validation import EpochValidation, schedule

        self.spec, self.trainer, self.phase_marks = spec, spec.trainer, phase_marks
        self.doing = "while starting"  # what the rank was doing, for the line an error ends the job with
        # A restart after a Pipe, ShardedByS3Key or train host was lost fails at once, before building a model.
        self.guard = LostHostGuard(list(spec.fragile_channels), train_hosts=spec.train_hosts)
        self.guard.check(force=True)
        self.task = make_task(spec)  # a user's task.loss that does not import fails here, before any data moves
        torch.manual_seed(spec.seed)
        ctx = ray.train.get_context()
        self.rank, self.world = ctx.get_world_rank(), ctx.get_world_size()
        self.device = ray.train.torch.get_device()
        self.control = Control(self.world, self.rank, self.guard)  # rank 0 watches the hosts between steps
        self.console = EventSender(enabled=self.rank == 0)  # the launcher's console: progress, metric lines, notes
        self.progress = EpochProgress(spec.id_check_rows, self.rank, self.world)  # the epoch's data position
        state, self.resumed_from = initial_state(spec, self.rank, self.control)
        self.resumed_at_step = state.step if state is not None else None
        self.step = self.epochs_done = 0
        self.resuming = False  # the next epoch is a resumed one, which may rightly hold no full batch
        if state is not None:  # where the checkpoint's run stood: read before the first epoch's data is asked for
            self.step, self.epochs_done, self.resuming = state.step, state.epochs_done, True
            self.progress.resume(state)
        self.cache = CacheEpochs(  # `pipeline.cache`: sealed by rank 0
            spec.cache, self.rank, spec.cached_train_selector is not None, spec.files_outlive_cache
        )
        self.cache.agree(self.control)
        if state is None or state.position is None:  # a resumed epoch's positions count in what they did
            self.progress.space = self.cache.space()
        self.progress.post_order(self.control, self.epochs_done)
        # The first epoch's data is asked for now, before the model is built: Ray Data's execution
        # (its coordinator, read and chain tasks, the first blocks) starts while timm imports and
        # builds the model and DDP wraps it, instead of after (issue 40; `trainers.next_epoch`).
        self.first_epoch = None
        self.passes: dict[str, int] = {}  # passes started in this group, by dataset (`EpochProgress.post_pass`)
        if not self._done():
            self.first_epoch = NextEpoch(self._torch_batches(ray.train.get_dataset_shard(self._next_pass())))
            phase_marks["data_asked"] = time.time()
        # On the rank's device before the optimizer, the EMA copy and a checkpoint's optimizer state are
        # made from it: `load_state_dict` puts the state where the parameters are at that moment.
        self.raw_model = build_model(spec).to(self.device)
        phase_marks["model_built"] = time.time()
        precision, why = choose_precision(self.trainer.precision, run_capability(self.device, self.control, self.rank))
        self.console.put("note", text=f"precision: {precision} ({why})")
        # The optimizer, schedule, GradScaler and EMA (`trainers.recipe`), and the callbacks around the
        # steps (`trainers.callbacks`): built here, before DDP wraps the model and compile changes it.
        self.recipe = Recipe(self.raw_model, spec, self.device, precision)
        # The loop's own parts first (checkpoints by step, phase marks, validation passes, step lines),
        # then keep-best, early stop and the user's: one list, called on named events.
        builtin = (StepCheckpoints(self), PhaseMarks(phase_marks), EpochValidation(self, schedule(spec)))
        self.callbacks = Callbacks(self.trainer, self.trainer.callbacks, builtin + (ConsoleLog(self.console),))
        self.view = RunView(self)
        self.checkpoint_due = False  # rank 0's clock found a timed checkpoint due, in this step's exchange
        self.last_outcome = None  # the last optimizer step's `StepOutcome` (`trainers.recipe`)
        self.group_rates: dict[int, dict] = {}  # rank 0: step -> named groups' rates, until recorded
        self.stop_request: str | None = None  # a callback's (early stop): the run ends after the event
        self.validation: list[dict] = []  # the run's passes, a resumed run's earlier ones too
        if state is not None:
            self._restore_weights(state)
        elif spec.pretrained:
            self._fine_tune_from(spec.pretrained)
        self.compiled = CompiledForward(self.raw_model, self.console) if self.trainer.compile else None
        # DDP's wrap broadcasts rank 0's parameters and buffers to every rank (init_sync), so the weights
        # file is read once, by rank 0, and the other ranks' random initialisation is overwritten.
        self.model = ray.train.torch.prepare_model(self.raw_model)
        hosts = list(spec.host_names)
        self.host_rows = torch.zeros(len(hosts) + 1, dtype=torch.long, device=self.device)  # last: unknown host
        self.train_rows = torch.zeros_like(self.host_rows)
        self.train_prep = torch.zeros(len(hosts) + 1, dtype=torch.float64, device=self.device)  # chain seconds
        self.steps = StepLog()  # bounded: buckets of the whole run, the latest steps exact (`smlaunch.series`)
        self.accounting = Accountant("train", spec.epoch_rows, self.world)
        self.mix = LabelMix(spec.num_classes, self.device) if self.task.builtin else None  # labels' mix per batch
        self.stopped, self.stopped_by = False, None
        self.cut_short = False  # the run ended inside an epoch
        self.checkpoint_log = CheckpointLog(spec.checkpoint_every_s)  # the timer counts from here

    def _fine_tune_from(self, weights: str) -> None:
        """`model.pretrained` into the fresh model, read by rank 0 alone (DDP's wrap copies it to the
        others). A resumed checkpoint holds a trained model, so it takes precedence and the file is not
        read then. A file that does not fit fails every rank with rank 0's line, rather than leaving
        the others waiting in DDP's first collective for a rank that is gone."""
        from smlaunch.errors import ConfigError
        from smlaunch.trainers.model import load_pretrained

        failure = None
        if self.rank == 0:
            try:
                self.console.put("note", text=load_pretrained(self.raw_model, weights).describe())
            except ConfigError as exc:
                failure = str(exc)
        failure = self.control.broadcast(failure)
        if failure:
            raise ConfigError(failure)

    def _restore_weights(self, state) -> None:
        from smlaunch.trainers.recipe import restore

        self.raw_model.load_state_dict(state.model)
        restore(self.recipe, self.callbacks, state)
        self.validation = list(state.validation or [])
        self.console.put(
            "resumed",
            step=self.step,
            text=f"resumed from {self.resumed_from} at step {self.step}, epoch {self.epochs_done + 1}"
            + (f", {drawn} of its samples already drawn" if (drawn := self.progress.drawn_before) is not None else "")
            + (
                f"; its weights take precedence over model.pretrained ({self.spec.pretrained}, not loaded)"
                if self.spec.pretrained
                else ""
            ),
        )
        self.stop_request = self.callbacks.stopped_early_line(self.step)  # a rerun of a run that stopped early
        if self.stop_request and self.rank == 0:
            self.console.put("note", text=self.stop_request)

    def _next_pass(self) -> str:
        """The dataset the next epoch iterates, its pass counted."""
        name = self.cache.dataset()
        self.passes[name] = self.passes.get(name, 0) + 1
        return name

    # --- the run ------------------------------------------------------------------------------

    def train(self) -> dict:
        import ray.train

        from smlaunch.trainers.next_epoch import NextEpoch

        shard = ray.train.get_dataset_shard(self.cache.dataset())
        pending = None  # this rank's numbers of the last step, summed over ranks one exchange later
        started, self.first_epoch = self.first_epoch, None  # its batches already asked for (`trainers.next_epoch`)
        self.callbacks.fire("on_train_start", self.view)
        while not self.stopped and not self.stop_request and not self._done():
            pending, exhausted = self._epoch(shard, pending, started)
            started = None
            if exhausted:
                self._close_epoch(complete=True)
                if not self._done():
                    name = self.cache.dataset()  # `pipeline.cache`: sealed now
                    self.progress.post_pass(self.epochs_done, self.passes.get(name, 0))
                    shard = ray.train.get_dataset_shard(self._next_pass())
                    started = NextEpoch(self._torch_batches(shard))
                self.callbacks.fire("on_epoch_end", self.view)  # a validation pass, a preemption's stop
        if pending is not None:
            self._record(self.control.flush(pending))
        self.cut_short = bool(self.progress.ids.parts)  # the step count (or a stop) ended the run inside an epoch
        if not self.stopped:
            self._finish()  # its checkpoint holds the cut-short epoch's ids: a longer rerun continues it
        if self.cut_short:
            self._close_epoch(complete=False)
        return self._result()

    def _epoch(self, shard, pending, started=None):
        """Steps until this epoch's data runs out on every rank (True), or the run ends (False)."""
        # A resumed epoch may rightly have no full batch left: the checkpoint came at its last full
        # batch (or at its end), and what is left is a remainder the loop counts but never trains on.
        resumed, self.resuming = self.resuming, False
        batches = self._batches(shard, started)
        self.model.train()
        steps_here = 0
        while not (self.trainer.steps and self.step >= self.trainer.steps):
            self.doing = f"at step {self.step + 1}"
            started = time.perf_counter()
            micro, waited = self._fetch(batches)
            if micro:
                self.phase_marks.setdefault("first_batch", time.time())
            decision = self.control.exchange(
                len(micro) == self.trainer.grad_accum_steps,
                bool(micro),
                pending,
                checkpoint_due=self.rank == 0 and self.checkpoint_log.due(),
                end=bool(self.stop_request),
            )
            if decision.previous is not None:
                self._record(decision.previous)
            pending = None
            if decision.stop:
                self.stop()
                return None, False
            if decision.end:  # a callback asked, on some rank: every rank finishes here
                self.stop_request = self.stop_request or "a callback on another rank ended the run"
                if self.rank == 0:
                    self.console.put("note", text=self.stop_request)
                return None, False
            if not decision.any_data:
                if steps_here == 0 and not resumed:  # no step now, nor in any epoch after: stop, not loop
                    self._raise_empty_epoch()
                return None, True
            steps_here += 1
            pending = self._train_step(micro, decision.all_full, waited, started)
            self.checkpoint_due = decision.checkpoint
            self.callbacks.fire("on_step_end", self.view, self.last_outcome)  # checkpoints, phase marks, yours
        return pending, False

    def _raise_empty_epoch(self):
        from smlaunch.errors import DataError

        raise DataError(
            f"channel 'train': epoch {self.epochs_done + 1} gave the train workers no full batch of "
            f"trainer.batch_size={self.trainer.batch_size} (a step needs one); the channel is empty or "
            "too small (an empty Pipe FIFO?)"
        )

    def _torch_batches(self, shard):
        """The epoch's batches, through the shuffle buffer (ours, not Ray Data's
        `local_shuffle_buffer_size`, which holds back 1.5x its rows before the first batch:
        `trainers.shuffle_buffer`)."""
        from smlaunch.trainers.shuffle_buffer import ShuffleBuffer

        batches = shard.iter_torch_batches(
            batch_size=self.trainer.batch_size,
            drop_last=False,
            device=self.device,
            prefetch_batches=self.trainer.prefetch_batches,
            pin_memory=self.device.type == "cuda",
        )
        buffer = self.spec.shuffle_buffer_rows
        return (
            ShuffleBuffer(buffer, self.trainer.batch_size, self.spec.seed + self.epochs_done)(batches)
            if buffer
            else batches
        )

    def _batches(self, shard, started=None):
        """This epoch's full batches (from `started`, the epoch already asked for, if given); a final
        partial one is counted (delivered), not trained on."""
        batches = started if started is not None else self._torch_batches(shard)
        return self.progress.full_batches(batches, self.trainer.batch_size)

    def _fetch(self, batches) -> tuple[list, float]:
        micro, waited = [], 0.0
        for _ in range(self.trainer.grad_accum_steps):
            before = time.perf_counter()
            batch = next(batches, None)
            waited += time.perf_counter() - before
            if batch is None:
                break
            micro.append(batch)
        return micro, waited

    def _train_step(self, micro: list, all_full: bool, waited: float, started: float):
        from smlaunch.trainers.step import train_step

        numbers = train_step(self, micro, all_full, waited, started)
        if self.world == 1:
            self._record(numbers.as_list())
            return None
        return numbers

    def _record(self, summed: list[float]) -> None:
        """The step just taken, over all ranks (called before the next step is taken)."""
        from smlaunch.trainers.control import record

        if self.rank == 0:
            entry = record(self.step, self.epochs_done + 1, summed, self.world, self.task.metric_names)
            if self.group_rates:
                entry["lrs"] = self.group_rates.get(self.step)
                self.group_rates = {s: r for s, r in self.group_rates.items() if s > self.step}
            self.steps.add(entry)
            self.callbacks.fire("on_log", self.view, entry)  # the console's step lines, yours

    def stop(self) -> None:
        self.guard.check(force=True)
        if not self.checkpoint_log.holds(self.step, self.epochs_done):
            self.save("stop")
        notice = self.control.preempted
        self.stopped_by = (
            f"Ray's preemption notice (nodes {', '.join(notice.preempted_node_ids)} drained)" if notice else None
        )
        self.console.put(
            "note", text=f"stopped at step {self.step} on {self.stopped_by or 'request'}; checkpoint written"
        )
        self.stopped = True

    def _close_epoch(self, complete: bool) -> None:
        from smlaunch.trainers.accounting import gather

        if complete:
            self.guard.check(force=True)  # an epoch a lost host cut short must not pass for a whole one
        progress = self.progress
        positions = progress.merge(self.control)
        # The ids' check gathers every id drawn: not on a stop (a spot interruption's grace is short).
        ids = None if self.stopped else gather(*progress.ids.take(), self.control, self.rank)
        records = len(self.accounting.epochs)
        self.accounting.close_epoch(
            ids,
            self.epochs_done + 1,
            complete,
            0,
            positions=progress.merged if positions else None,
            units=self.cache.units(self.spec.train_units, progress.space),
            resumed_by_position=progress.resumed_by_position,
        )
        if complete:  # before any rank asks for the next epoch: it reads the cache this sealed
            delivered = progress.merged.delivered if positions and progress.merged is not None else None
            # A resumed epoch's ids are the ones drawn since the resume: the cache is checked by its rows then.
            drawn = ids[0] if ids and not progress.resumed_by_position else None
            self.cache.close(drawn, delivered, self.console)
            self.cache.agree(self.control, self.console)
            progress.space = self.cache.space()  # the next epoch's positions count in the cache's shards
        progress.resumed_by_position = 0
        mixed = self.control.gather(self.mix.take(), self.rank) if self.mix is not None else None
        if mixed is not None and self.rank == 0 and len(self.accounting.epochs) > records:
            from smlaunch.trainers.mixing import mix_summary

            self.accounting.epochs[-1]["label_mix"] = mix_summary(mixed)
        if complete:
            self.epochs_done += 1
        progress.next_epoch(self.epochs_done)

    def _finish(self) -> None:
        self.callbacks.fire("on_train_end", self.view)  # first the final validation pass (`EpochValidation`)
        if self.stopped:  # that pass met a drain: stopped, checkpointed
            return
        self.doing = f"while finishing at step {self.step}"
        if not self.checkpoint_log.holds(self.step):
            self.save("end")
        if self.rank == 0:
            from smlaunch.trainers.export import save_model

            keep = self.callbacks.keep_best
            save_model(
                self.recipe.validated,
                self.spec.card(),
                self.step,
                {
                    "loss": self.steps.last["loss"] if self.steps.last else None,
                    "validation": self.validation[-1] if self.validation else None,
                    "best": keep.best() if keep else None,
                },
                state=keep.weights if keep else None,
            )

    def save(self, why: str) -> None:
        """A checkpoint: every rank reports (a barrier), rank 0 writes the state, with the ids the group
        has drawn in the current epoch (its data position, whatever the next world size). `why`
        (interval, timer, stop, end) and the seconds it took go into the report's `checkpoints`:
        what a cadence costs."""
        started = time.monotonic()
        self._write_checkpoint()
        self.checkpoint_log.written(self.step, self.epochs_done, why, started)

    def _write_checkpoint(self) -> None:
        import tempfile

        import ray.train

        from smlaunch.trainers.checkpoints import TrainState, checkpoint_name, save_train_state
        from smlaunch.trainers.recipe import checkpoint_fields

        self.guard.check(force=True)
        where = self.progress.checkpoint_fields(self.control)
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if self.rank == 0:
                state = TrainState(
                    model=self.raw_model.state_dict(),
                    **checkpoint_fields(self.recipe, self.callbacks),
                    validation=self.validation,
                    step=self.step,
                    epochs_done=self.epochs_done,
                    world_size=self.world,
                    config_sha256=self.spec.config_sha256,
                    **where,
                )
                save_train_state(tmp, state)
                checkpoint = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report(
                {"step": self.step, "loss": self.steps.last["loss"] if self.steps.last else None},
                checkpoint=checkpoint,
                checkpoint_dir_name=checkpoint_name(self.step),
            )

    def _result(self) -> dict:
        from smlaunch.trainers.evaluate import all_reduce
        from smlaunch.trainers.ranks import adopt_rank0_buffers, rank_digest

        host_rows, train_rows, train_prep = (
            all_reduce(x, self.world) for x in (self.host_rows, self.train_rows, self.train_prep)
        )
        adopt_rank0_buffers(self.raw_model, self.world)
        workers = self.control.gather(rank_digest(self.raw_model, self.rank), self.rank)
        self.console.flush(wait=True)
        hosts = list(self.spec.host_names) + ["unknown"]
        return {
            "steps": list(self.steps.recent),
            "step_series": self.steps.to_dict(),
            "validation": self.validation,
            "final_step": self.step,
            # One way of counting epochs everywhere: the 1-based epoch a step belongs to.
            "epochs": self.epochs_done + self.cut_short,
            "epochs_complete": self.epochs_done,
            "stopped_at_step": self.step if self.stopped else None,
            "stopped_early": bool(self.stop_request),
            "best": self.callbacks.keep_best.best() if self.callbacks.keep_best else None,
            "skipped_steps": self.recipe.skipped,
            "stopped_by": self.stopped_by,
            "resumed_from": self.resumed_from,
            "resumed_at_step": self.resumed_at_step,
            "phase_marks": self.phase_marks,
            "checkpoints": self.checkpoint_log.summary(),
            "steps_span_s": self.phase_marks.get("last_step", 0) - self.phase_marks.get("first_step", 0),
            "sample_accounting": self.accounting.report(),
            "workers": workers,
            "host_rows": {name: int(n) for name, n in zip(hosts, host_rows.tolist(), strict=False)},
            "chain_by_host": {
                name: {"train_rows": int(n), "chain_s": round(sec, 4)}
                for name, n, sec in zip(hosts, train_rows.tolist(), train_prep.tolist(), strict=False)
                if n
            },
        }

    def _done(self) -> bool:
        return self.step >= self.trainer.steps if self.trainer.steps else self.epochs_done >= self.trainer.epochs
