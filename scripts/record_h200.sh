#!/usr/bin/env bash
# The recorded H200 runs: Part IV (benches, world) and the miniatures of Parts II and III.
# Usage: scripts/record_h200.sh OUTDIR [benches|world|world-v2|personas|collab] [seconds]
#   benches  -> bench/results/{sampling,rl}-h200.json  (BENCH_OUT=DIR writes them there instead;
#               BENCH_ONLY=sampling or rl runs one; wheels in .whl/ — trl, datasets, dill,
#               multiprocess, which the machine's image lacks — are installed to /tmp/site first)
#   world-v2-resume -> the same, continuing the partial recording data/runs/world-v2 (copied to OUTDIR first,
#               with the models' weights from data/models) from the commit its records name (see below)
#   world    -> polyvox world run --scale h200     (the panel-only recording in data/runs/world; the pipeline
#               now refuses to add to it: world-v2 replaces it)
#   world-v2 -> polyvox world run --scale h200-v2 --parallel ${PARALLEL:-10} --mps, the models stage copied from
#               data/models (their record data/runs/world/models has h200-v2's models settings), every seed of
#               both arms at once; run it from one commit's tree with POLYVOX_GIT_COMMIT set, so that every record
#               names one commit; then `python -m polyvox.ship OUTDIR data/runs/world-v2` keeps the records
#   world-climbs -> hill-climbs alone on a copy of data/runs/world with a climb section CLIMB (see the case below):
#               the climb pilot and the powered climbs of issue 21; scripts/device_tree.sh prepare COMMIT climbs
#               slims the tree to what they read (seed 0's RL adapters, bands, pilot, models)
#   world-climb-plan -> a climb pilot of candidate recipes, climb_design's rule, then the powered climbs, in one
#               detached recording (the case below); one H200 call chain of ~20 min:
#                 here: scripts/device_tree.sh prepare HEAD climbs; call 1 as for world-v2 (carry .whl and .rec),
#                 then scripts/record_detached.sh start climbs bash scripts/record_h200.sh runs/world-climbs \
#                 world-climb-plan 3000; later calls watch and pack runs/world-climbs-pilot and runs/world-climbs
#                 (records only: PACK_KEEP unset)
#   personas -> polyvox personas run --scale h200  (recorded in data/runs/personas-h200)
#   personas-v2 -> polyvox personas run --scale h200-v2 --parallel ${PARALLEL:-12} --mps (issue 22; see the case)
#   collab   -> polyvox collab run --scale h200    (recorded in data/runs/collab-h200, models in data/models/collab-h200)
# Runs are resumable: a second call continues where the first stopped (same OUTDIR).
#
# world-v2 through the lent H200 (a call lasts at most 10 min, the machine is kept only while calls follow within
# 30 s, and its working tree is copied afresh each call), as tried on 2026-12-02 (models to bands in 980 s):
#   1. here: wheels the image lacks into .whl/ (trl datasets dill multiprocess math-verify latex2sympy2_extended
#      antlr4-python3-runtime Pebble pydantic pydantic_core annotated-types typing-inspection openai jiter distro
#      sniffio, at requirements.lock's versions); take data/runs/{personas-h200,collab-h200} and
#      data/runs/world/{seed-*,bands*} out of the index for the calls (the tree must stay under 64 MiB; keep
#      data/models and data/runs/world/models) and put them back before any commit;
#   2. first call (carry .whl): copy lib configs scripts data pyproject.toml .whl to /tmp/pv, install the wheels
#      to /tmp/site, PYTHONPATH=/tmp/pv/lib:/tmp/site, POLYVOX_GIT_COMMIT=<HEAD>, then from /tmp/pv
#      `scripts/record_detached.sh start world bash scripts/record_h200.sh runs/world-v2 world-v2 3000` and watch;
#   3. later calls, back to back: `cd /tmp/pv && scripts/record_detached.sh watch 540 world` (the launcher's own
#      stall watch handles a hung stage; UNSTICK is not needed);
#   4. last call: `python3 -m polyvox.ship runs/world-v2 /tmp/wv2`, then tar it into $OUT in pieces of <= 15 MiB
#      (at most 8 files come back); bring the launcher logs too.
#
# world-v2-resume (2026-12-02's partial recording; its stages name commit ba745e1):
#   here:  scripts/device_tree.sh prepare ba745e1   (.rec = that commit's lib, configs, pyproject.toml; the index
#          slimmed to what a world call reads; prints the size a call carries) — and `restore` before any commit;
#   call 1 (carry .whl and .rec): rm -rf /tmp/pv; mkdir -p /tmp/pv && cp -r scripts data /tmp/pv/ &&
#          cp -r .rec/lib .rec/configs .rec/pyproject.toml /tmp/pv/ && cd /tmp/pv && (install .whl to /tmp/site);
#          export PYTHONPATH=/tmp/pv/lib:/tmp/site POLYVOX_GIT_COMMIT=$(cat .rec/COMMIT) PYTHONUNBUFFERED=1 (.rec/COMMIT
#          copied to /tmp/pv too);
#          scripts/record_detached.sh start world bash scripts/record_h200.sh runs/world-v2 world-v2-resume 3000;
#          scripts/record_detached.sh watch 500 world; cp /tmp/world.log $OUT/; scripts/record_detached.sh pack
#          $OUT runs/world-v2 15
#   later calls as in step 3, each packing into $OUT: the stages left (seed 0's evaluation, both band draws, the
#   hill-climbs) write no weights a later stage reads, so a lost machine loses only the stages in flight: copy
#   the packed records' complete stages into data/runs/world-v2 and resume again.
set -u
out=${1:-runs/world-h200}; what=${2:-world}; budget=${3:-540}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
quiet() { grep -v -E "it/s\]|s/it\]|Loading weights|sample/s|Warning|warn"; }
case "$what" in
  benches)
    if ls .whl/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    dest=${BENCH_OUT:-bench/results}; only=${BENCH_ONLY:-sampling,rl}
    if [[ $only == *sampling* ]]; then
      python3 bench/sampling.py --prompts 128 --n 8 --max-tokens 128 --batch-size 256 --batch-sizes 256,512,1024 \
        --naive-subset 4 --rounds 3 --agree-requests 512 --out "$dest/sampling-h200.json" 2>&1 | grep --line-buffered -v Warning
    fi
    if [[ $only == *rl* ]]; then
      python3 bench/rl_step.py --sizes 128,512 --baseline-sizes 128 --rounds 3 --steps-per-round 3 \
        --out "$dest/rl-h200.json" 2>&1 | grep --line-buffered -v -i warning
    fi ;;
  world-v2|world-v2-resume)
    if [[ $what == world-v2-resume && ! -e $out/manifest.json ]]; then
      # the shipped partial recording, with the models' weights that shipping left out (the models stage copied
      # them from data/models); complete stages are skipped, the rest run
      mkdir -p "$(dirname "$out")" && cp -r data/runs/world-v2 "$out" || exit 1
      for m in tiny-base tiny-think; do cp data/models/$m/*.safetensors "$out/models/$m/" || exit 1; done
    fi
    timeout "$budget" python3 -m polyvox.cli world run --out "$out" --scale h200-v2 \
      --models-from data/models data/runs/world/models --parallel "${PARALLEL:-10}" --mps 2>&1 | quiet | tail -30
    echo "world-v2 run exit: ${PIPESTATUS[0]}" ;;
  world-climbs)
    # hill-climbs alone on the shipped matched run (data/runs/world: its models, pilot, bands and seed 0's easy
    # adapters), with a climb section CLIMB (YAML flow mapping, e.g. '{lr: 1.0e-4, eval_every: 10, seeds: [100,
    # 101]}') added to configs/world/h200-v2.yaml under the scale's own name, so every recorded stage's settings
    # still match; the climb seeds run (CLIMB_SEEDS, default the section's seeds), RL seeds are never re-run.
    # WORLD_SRC and WORLD_SCALE (default data/runs/world and configs/world/h200-v2.yaml) name another run and its
    # scale (a smoke run, to try the plumbing on a CPU with MPS= empty)
    src=${WORLD_SRC:-data/runs/world}; scale=${WORLD_SCALE:-configs/world/h200-v2.yaml}
    if [[ ! -e $out/manifest.json ]]; then
      mkdir -p "$(dirname "$out")" && cp -r "$src" "$out" || exit 1
      rm -rf "$out"/seed-*/hillclimb-* "$out/launch"  # earlier climbs: another recipe (scripts/device_tree.sh climbs)
      for m in tiny-base tiny-think; do  # a shipped run keeps its models' weights in data/models
        [[ -e $out/models/$m/model.safetensors ]] || cp data/models/$m/*.safetensors "$out/models/$m/" || exit 1
      done
    fi
    python3 - "$out/climb-scale.yaml" "$scale" <<PY || exit 1
import sys, yaml
s = yaml.safe_load(open(sys.argv[2]))
s.update(name=s.get("name", sys.argv[2].rsplit("/", 1)[-1].rsplit(".", 1)[0]),
         climb=yaml.safe_load("""${CLIMB:?CLIMB: the climb section, a YAML flow mapping}"""))
open(sys.argv[1], "w").write(yaml.safe_dump(s, sort_keys=False))
PY
    seeds=${CLIMB_SEEDS:-$(python3 -c "import yaml,sys; print(*yaml.safe_load(open(sys.argv[1]))['climb']['seeds'])" "$out/climb-scale.yaml")}
    # shellcheck disable=SC2086 - the seeds and MPS are words
    timeout "$budget" python3 -m polyvox.cli world run --out "$out" --scale "$out/climb-scale.yaml" \
      --stages hillclimb-panel,hillclimb-think --seeds $seeds --parallel "${PARALLEL:-10}" ${MPS---mps} 2>&1 | quiet | tail -30
    echo "world-climbs run exit: ${PIPESTATUS[0]}" ;;
  world-climb-plan)
    # issue 21's climbs in one detached recording: a pilot of candidate climb recipes (CANDIDATES, learning rates;
    # PILOT_SEEDS climb seeds each, both arms at once), then polyvox.studies.world.climb_design's rule (written
    # before the pilot runs: the recipe whose worse arm needs the fewest seeds for a 10-point gain at 80 % power),
    # then the powered climbs with that recipe and seed count (at most MAX_SEEDS per arm) into OUTDIR; the pilots
    # in OUTDIR-pilot/lr-<rate>, the design in OUTDIR-pilot/design.json
    every=${EVAL_EVERY:-10}; k=${ENDPOINT_EVALS:-3}; pseeds=${PILOT_SEEDS:-100, 101, 102}
    # one candidate after another: each launcher starts its own CUDA MPS daemon, and two at once on one GPU are not
    # something this project has tried
    pilots=(); mkdir -p "$out-pilot" || exit 1
    for lr in ${CANDIDATES:-1.0e-4 2.5e-4}; do
      dir=$out-pilot/lr-$lr; pilots+=("$dir")
      CLIMB="{lr: $lr, eval_every: $every, seeds: [$pseeds], endpoint_evals: $k}" PARALLEL=${PILOT_PARALLEL:-6} \
        bash "$0" "$dir" world-climbs "$budget" 2>&1 | tee "$dir.log" | tail -3
    done
    python3 -m polyvox.studies.world.climb_design "${pilots[@]}" --endpoint-evals "$k" --max-seeds "${MAX_SEEDS:-10}" \
      --out "$out-pilot/design.json" || exit 1
    section=$(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['climb']))" "$out-pilot/design.json")
    CLIMB=$section bash "$0" "$out" world-climbs "$budget"
    echo "world-climb-plan exit: $?" ;;
  personas-v2)
    # issue 22's run (configs/personas/h200-v2.yaml: cap, validation sweep, 5 seeds per arm, the judge model), its
    # stages as a job graph, PARALLEL workers on the GPU under MPS; resumable (a second start continues). Calls:
    #   here: scripts/device_tree.sh prepare HEAD personas; call 1 carries .whl and .rec as for world-v2, then
    #   scripts/record_detached.sh start personas bash scripts/record_h200.sh runs/personas-h200-v2 personas-v2 3000;
    #   every call: scripts/record_detached.sh watch SECONDS personas, then PACK_KEEP='*' ... pack $OUT runs/personas-h200-v2
    # shellcheck disable=SC2086 - MPS is a word or none
    timeout "$budget" python3 -m polyvox.cli personas run --out "$out" --scale h200-v2 \
      --parallel "${PARALLEL:-12}" ${MPS---mps} 2>&1 | quiet | tail -40
    echo "personas-v2 run exit: ${PIPESTATUS[0]}" ;;
  personas-v3-judge)
    # the judge model's verdicts (stage judge: judge-by-model/) on the shipped data/runs/personas-h200-v3, whose
    # systems, rubric verdicts and judge model a call carries (scripts/device_tree.sh prepare HEAD personas-judge);
    # pack OUTDIR/judge-by-model afterwards and copy it into data/runs/personas-h200-v3
    if [[ ! -e $out/manifest.json ]]; then mkdir -p "$(dirname "$out")" && cp -r data/runs/personas-h200-v3 "$out" || exit 1; fi
    timeout "$budget" python3 -m polyvox.cli personas run --out "$out" --scale h200-v3 --stages judge 2>&1 | quiet | tail -30
    echo "personas-v3-judge run exit: ${PIPESTATUS[0]}" ;;
  collab-ordered)
    # issue 23's runs (SCALE, default h200-ordered; h200-ordered-v2: the powered one): the ordered pool, its validation check, PD with the
    # protocol-validity check, 100 RL steps, seeds 0-2 at once under MPS); resumable (a second start continues):
    #   here: scripts/device_tree.sh prepare HEAD; call 1 carries .whl and .rec as for world-v2, then
    #   SCALE=h200-ordered-v2 scripts/record_detached.sh start collab bash scripts/record_h200.sh runs/collab-h200-ordered-v3 collab-ordered 3000;
    #   every call: scripts/record_detached.sh watch SECONDS collab, then PACK_KEEP='*' ... pack $OUT runs/collab-h200-ordered-v3
    # shellcheck disable=SC2086 - MPS is a word or none
    timeout "$budget" python3 -m polyvox.cli collab run --out "$out" --scale "${SCALE:-h200-ordered}" \
      --parallel "${PARALLEL:-3}" ${MPS---mps} 2>&1 | quiet | tail -40
    echo "collab-ordered run exit: ${PIPESTATUS[0]}" ;;
  world|personas|collab)
    timeout "$budget" python3 -m polyvox.cli "$what" run --out "$out" --scale h200 2>&1 | quiet | tail -30
    echo "$what run exit: ${PIPESTATUS[0]}" ;;
  *) echo "usage: $0 OUTDIR [benches|world|world-v2|world-v2-resume|world-climbs|world-climb-plan|personas|personas-v2|personas-v3-judge|collab-ordered|collab] [seconds]" >&2; exit 2 ;;
esac
