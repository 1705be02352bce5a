"""What makes a run correct: precision choice, training plan, the run entry points."""
