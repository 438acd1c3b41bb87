# Sourced by hack/demo.sh after the samples are applied; k, say and NS are set.

say "Waiting for the templates: kubectl wait --for=condition=Ready pt/ssa-pro pt/support-assistant"
k wait -n "$NS" --for=condition=Ready --timeout=60s pt/ssa-pro pt/support-assistant

say "The over-budget sample: kubectl wait --for=condition=BudgetExceeded pt/over-budget-demo"
k wait -n "$NS" --for=condition=BudgetExceeded --timeout=60s pt/over-budget-demo
k get pt over-budget-demo -n "$NS" -o jsonpath='{range .status.conditions[?(@.type=="BudgetExceeded")]}{.message}{"\n"}{end}'

say "Budgets at admission: kubectl apply --dry-run=server -f config/samples/promptops_v1_prompttemplate_overbudget.yaml"
out=$(k apply -n "$NS" --dry-run=server -f config/samples/promptops_v1_prompttemplate_overbudget.yaml 2>&1)
echo "$out"
grep -q '^Warning: intent chat needs ' <<<"$out" || { echo "the webhook printed no budget warning; the manager's log:"; tail -50 "$DEMO/manager.log"; exit 1; }

say "kubectl get pt -n $NS (token columns)"
k get pt -n "$NS"

say "Part of the rendered ConfigMap ssa-pro-prompts (key analyze.txt)"
k get configmap ssa-pro-prompts -n "$NS" -o jsonpath='{.data.analyze\.txt}' | head -n 8
echo " [...]"
k get configmap ssa-pro-prompts -n "$NS" -o jsonpath='{.data.analyze\.txt}' | tail -n 4
echo
k get configmap ssa-pro-prompts -n "$NS" -o jsonpath='revision annotation: {.metadata.annotations.promptops\.io/revision}{"\n"}'

say "The MemoryBank: kubectl wait --for=condition=Ready mb/support-agent"
k wait -n "$NS" --for=condition=Ready --timeout=60s mb/support-agent
k get mb support-agent -n "$NS" -o jsonpath='next run: {.status.nextScheduleTime}{"\n"}mission hash: {.status.missionHash}{"\n"}fixed prompt tokens: {.status.promptTokens}{"\n"}'
k get configmap support-agent-consolidation -n "$NS" -o jsonpath='{.data.prompt\.txt}' | head -n 4
echo "[...]"

say "Trigger a run by annotation: promptops.io/consolidate-requested-at"
k annotate -n "$NS" mb/support-agent --overwrite "promptops.io/consolidate-requested-at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
for _ in $(seq 1 50); do [[ -n "$(k get jobs -n "$NS" -l promptops.io/memorybank=support-agent -o name)" ]] && break; sleep 0.2; done
k get jobs -n "$NS" -l promptops.io/memorybank=support-agent
k get mb support-agent -n "$NS" -o jsonpath='active job: {.status.activeJob}{"\n"}'
cat <<'NOTE'

The local control plane has no kubelet, so the Job's pod never starts here.
The same work runs locally against SQLite with the same binary:

  bin/promptops facts import --bank promptops-demo/support-agent --store sqlite:///tmp/bank.db facts.jsonl
  bin/promptops consolidate  --bank promptops-demo/support-agent --store sqlite:///tmp/bank.db \
      --llm-base-url http://localhost:11434/v1 --model qwen2.5:7b
  bin/promptops observations list --bank promptops-demo/support-agent --store sqlite:///tmp/bank.db
NOTE
