"""Operations on a topic: administration, stop/resume/terminate, cleanup, dead letters."""
