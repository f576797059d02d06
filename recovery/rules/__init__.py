"""The pure rules of recovery: decisions from facts, with no Django, no database and no disk (import-linter
keeps them so). classify: what a run's facts say and what may follow; gates: admission gates and bounds;
batches: a batch's item states; bulk: what a bulk action does to one task; workspace_diff: how a workspace
differs from its manifest, kind by kind."""
