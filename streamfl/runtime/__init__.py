"""The engine loop, the learners run on it, experiments and the live view."""
