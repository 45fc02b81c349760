"""The Kinema4D transformer and its named size configurations."""

from k4d_model.model.configs import MODEL_CONFIGS, ModelConfig, get_model_config
from k4d_model.model.transformer import Kinema4DTransformer3DModel

__all__ = ["MODEL_CONFIGS", "ModelConfig", "get_model_config", "Kinema4DTransformer3DModel"]
