# Sourced by hack/demo.sh after the samples are applied; k, say and NS are set.

say "Waiting for the templates: kubectl wait --for=condition=Ready pt/ssa-pro pt/support-assistant"
k wait -n "$NS" --for=condition=Ready --timeout=60s pt/ssa-pro pt/support-assistant

say "The over-budget sample: kubectl wait --for=condition=BudgetExceeded pt/over-budget-demo"
k wait -n "$NS" --for=condition=BudgetExceeded --timeout=60s pt/over-budget-demo
k get pt over-budget-demo -n "$NS" -o jsonpath='{range .status.conditions[?(@.type=="BudgetExceeded")]}{.message}{"\n"}{end}'

say "kubectl get pt -n $NS (token columns)"
k get pt -n "$NS"

say "Part of the rendered ConfigMap ssa-pro-prompts (key analyze.txt)"
k get configmap ssa-pro-prompts -n "$NS" -o jsonpath='{.data.analyze\.txt}' | head -n 8
echo " [...]"
k get configmap ssa-pro-prompts -n "$NS" -o jsonpath='{.data.analyze\.txt}' | tail -n 4
echo
k get configmap ssa-pro-prompts -n "$NS" -o jsonpath='revision annotation: {.metadata.annotations.promptops\.io/revision}{"\n"}'
