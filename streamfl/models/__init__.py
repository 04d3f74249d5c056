"""Client models: losses, step sizes and stacked linear learners."""

from .linear import StackedLinear, project_l2_ball
from .losses import get_loss, loss_of_scores
from .step_sizes import StepSize

__all__ = ["StackedLinear", "StepSize", "get_loss", "loss_of_scores", "project_l2_ball"]
