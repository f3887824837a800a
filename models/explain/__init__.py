"""Why a label was returned: the linear explainer (tree path, TF-IDF terms) and which explainer a bundle gets."""
