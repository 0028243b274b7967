"""Files read and written safely: whole-or-absent writes (``atomic``) and JSON from files a user can
edit, read strictly (``jsonfile``). No torch.
"""
