"""The judge card: how far a run's judges can be trusted (reliability, score distribution,
length, position and self-preference bias, agreement with people, juries), each finding
tested and the family corrected with Holm (`build.judge_card` assembles it)."""
